# cython: language_level=3
"""Thin wrapper of the CPU batched-matmul kernel: pointers, shapes, strides in; status out."""
from .status cimport check_status
from libc.stdint cimport int64_t, uintptr_t

from .batched_abi cimport (config_dict, fill_problem, kl_batched_config, kl_batched_cuda_config,
                           kl_batched_entry, kl_batched_matmul_cpu, kl_batched_matmul_cpu_var,
                           kl_batched_problem, kl_last_error)


def matmul(int64_t m, int64_t n, int64_t k, shape, a, b, c, d, double alpha, double beta,
           int dtype, int num_threads=0):
    """D = alpha * A @ B + beta * C over a stack (see batched.h); a, b, c, d are
    (address, batch strides, row stride, column stride) in elements."""
    cdef kl_batched_problem p
    fill_problem(&p, m, n, k, shape, a, b, c, d, alpha, beta)
    cdef int status
    with nogil:
        status = kl_batched_matmul_cpu(&p, dtype, num_threads)
    check_status(status)


def matmul_var(uintptr_t table, int64_t count, double alpha, double beta, int dtype,
               int num_threads=0):
    """The variable-size form: `table` is the address of count x 15 int64 (kl_batched_entry)."""
    cdef int status
    with nogil:
        status = kl_batched_matmul_cpu_var(<const kl_batched_entry *> table, count, alpha, beta,
                                           dtype, num_threads)
    check_status(status)


def config(int64_t m, int64_t n, int64_t k, int dtype, int algo, int fp32_mode):
    """The CUDA kernel configuration the launcher picks for this problem (a dict)."""
    cdef kl_batched_config cfg
    if kl_batched_cuda_config(m, n, k, dtype, algo, fp32_mode, &cfg) != 0:
        raise ValueError(kl_last_error().decode())
    return config_dict(&cfg)
