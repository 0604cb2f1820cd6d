# cython: language_level=3
"""Thin wrapper of the CPU block-sparse kernels: pointers and sizes in; status out."""
from .status cimport check_status
from .blocksparse_abi cimport (fill_spgemm, fill_spmm, kl_bs_spgemm_cpu, kl_bs_spgemm_problem,
                               kl_bs_spmm_cpu, kl_bs_spmm_problem, kl_last_error)


def spmm(tuple dims, tuple ptrs, tuple lds, double alpha, double beta, int dtype,
         int num_threads=0):
    """C = alpha * A @ B + beta * C in place on C (see blocksparse.h); RuntimeError on failure."""
    cdef kl_bs_spmm_problem c
    fill_spmm(&c, dims, ptrs, lds, alpha, beta, 0, 0)
    cdef int status
    with nogil:
        status = kl_bs_spmm_cpu(&c, dtype, num_threads)
    check_status(status)


def spgemm(tuple dims, tuple ptrs, int phase, int dtype, int num_threads=0):
    """One SpGEMM phase (0 count, 1 columns, 2 values; see blocksparse.h)."""
    cdef kl_bs_spgemm_problem c
    fill_spgemm(&c, dims, ptrs)
    cdef int status
    with nogil:
        status = kl_bs_spgemm_cpu(&c, phase, dtype, num_threads)
    check_status(status)
