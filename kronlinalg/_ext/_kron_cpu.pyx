# cython: language_level=3
"""Thin wrapper of the CPU Kronecker-matmul kernel: pointers, shapes, strides in; status out."""
from .fields cimport buffer_address
from .status cimport check_status
from cpython.array cimport array
from libc.stdint cimport uintptr_t

from .kron_abi cimport (fill_packed, fill_problem, kl_kron_cpu_pass_counts, kl_kron_matmul_cpu,
                        kl_kron_problem, kl_last_error, pack_layout)


def matmul(m1, m2, factors, x, y, double alpha, double beta, int dtype, int max_fused=0,
           int num_threads=0):
    """Run Y = alpha * X @ kron(F) + beta * Y in place on Y; raises RuntimeError on failure."""
    cdef kl_kron_problem c
    cdef tuple keep = fill_problem(&c, m1, m2, factors, x, y, alpha, beta, max_fused)
    cdef int status
    with nogil:
        status = kl_kron_matmul_cpu(&c, dtype, num_threads)
    check_status(status)


def passes(m1, m2, factors, int dtype, int max_fused=0):
    """Number of passes over memory the CPU kernel makes for these factors (-1: not a valid
    problem)."""
    cdef kl_kron_problem c
    cdef tuple keep = fill_problem(&c, m1, m2, factors, (1, 0, 0, 1), (1, 0, 0, 1),
                                            1.0, 0.0, max_fused)
    return kl_kron_cpu_pass_counts(&c, dtype, NULL, 0)


def pass_counts(m1, m2, factors, int dtype, int max_fused=0):
    """The number of factors of each of the CPU kernel's passes, in the order they run (the
    first pass takes the last factors)."""
    cdef kl_kron_problem c
    cdef tuple keep = fill_problem(&c, m1, m2, factors, (1, 0, 0, 1), (1, 0, 0, 1),
                                            1.0, 0.0, max_fused)
    cdef array counts = array('i', [0] * max(1, len(factors)))
    cdef int n = kl_kron_cpu_pass_counts(&c, dtype, counts.data.as_ints, len(counts))
    if n < 0:
        raise ValueError("factors: not a valid problem")
    return list(counts[:n])


def pack(m1, m2, factors, x, y):
    """A problem's shapes and strides packed once (factors: (P, Q, row stride, col stride);
    x, y: (row stride 1, row stride 2, element stride)), for launch() with new pointers."""
    return pack_layout(m1, m2, factors, x, y)


def launch(tuple packed, fptrs, uintptr_t xptr, uintptr_t yptr, double alpha, double beta,
           int dtype, int num_threads=0):
    """Run a packed problem (pack) with these pointers; raises RuntimeError on failure."""
    cdef kl_kron_problem c
    cdef array ptrs = array('Q', fptrs)
    fill_packed(&c, packed, ptrs, xptr, yptr, alpha, beta)
    cdef int status
    with nogil:
        status = kl_kron_matmul_cpu(&c, dtype, num_threads)
    check_status(status)


def launch_arrays(tuple packed, factors, x, y, double alpha, double beta, int dtype,
                  int num_threads=0):
    """launch() with the pointers taken from NumPy arrays of the packed problem's layout (the
    per-signature fast path: the caller has checked shapes, strides and dtypes)."""
    cdef kl_kron_problem c
    cdef Py_ssize_t n = len(factors), i
    cdef array ptrs = array('Q', [0]) * n
    for i in range(n):
        ptrs.data.as_ulonglongs[i] = buffer_address(factors[i])
    fill_packed(&c, packed, ptrs, buffer_address(x), buffer_address(y), alpha, beta)
    cdef int status
    with nogil:
        status = kl_kron_matmul_cpu(&c, dtype, num_threads)
    check_status(status)
