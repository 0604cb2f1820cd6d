# cython: language_level=3
"""Thin wrapper of the CPU Kronecker-sparse kernel: pointers, pattern, strides in; status out."""
from .status cimport check_status
from .structured_abi cimport fill_problem, kl_ks_matmul_cpu, kl_ks_problem, kl_last_error


def matmul(pattern, batch, int layout, values, x, y, int dtype, int num_threads=0):
    """One factor: Y = X Kᵀ (layout 0) or Y = K X (layout 1), written into y; RuntimeError on failure.

    pattern (a, b, c, d); values (ptr, s0, s1, s2, s3); x, y (ptr, leading dimension), elements.
    """
    cdef kl_ks_problem c
    fill_problem(&c, pattern, batch, layout, values, x, y)
    cdef int status
    with nogil:
        status = kl_ks_matmul_cpu(&c, dtype, num_threads)
    check_status(status)
