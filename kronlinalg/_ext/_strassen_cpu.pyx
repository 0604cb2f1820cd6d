# cython: language_level=3
"""Thin wrapper of strassen_matmul's CPU kernels: pointers, sizes, strides in; status out."""
from .status cimport check_status
from .strassen_abi cimport (fill_leaves, fill_pass, kl_last_error, kl_strassen_leaves,
                            kl_strassen_pass, kl_strassen_pass_cpu, kl_strassen_targets_cpu)


def run_pass(int stage, mh, kh, nh, lda, ldb, a_ptrs, b_ptrs, int dtype, int num_threads=0):
    """One element-wise pass (1: S1, 2: S3+S4, 3: S6+S7) over the operand blocks, in place."""
    cdef kl_strassen_pass c
    fill_pass(&c, stage, mh, kh, nh, lda, ldb, a_ptrs, b_ptrs)
    cdef int status
    with nogil:
        status = kl_strassen_pass_cpu(&c, dtype, num_threads)
    check_status(status)


def add_targets(m, n, ldm, ldc, double alpha, double beta, bint first, leaves, int dtype,
                int num_threads=0):
    """C_t = (first ? beta C_t : C_t) + sign_t alpha M for each leaf (M ptr, 0, targets)."""
    cdef kl_strassen_leaves c
    fill_leaves(&c, m, n, 0, ldm, 0, ldc, alpha, beta, first, leaves)
    cdef int status
    with nogil:
        status = kl_strassen_targets_cpu(&c, dtype, num_threads)
    check_status(status)
