# cython: language_level=3
"""Thin wrapper of the CUDA batched-matmul kernels: pointers, shapes, strides, stream in;
status out."""
from .status cimport check_status
from libc.stdint cimport int64_t, uintptr_t

from .batched_abi cimport (fill_problem, kl_batched_cuda_current_device,
                           kl_batched_cuda_device_check, kl_batched_float32_mode,
                           kl_batched_matmul_cuda, kl_batched_matmul_cuda_var,
                           kl_batched_var_table_cuda,
                           kl_batched_problem, kl_last_error)


def matmul(int64_t m, int64_t n, int64_t k, shape, a, b, c, d, double alpha, double beta,
           int dtype, int algo, uintptr_t stream):
    """Enqueue D = alpha * A @ B + beta * C over a stack on `stream` (see batched.h)."""
    cdef kl_batched_problem p
    fill_problem(&p, m, n, k, shape, a, b, c, d, alpha, beta)
    cdef int status
    with nogil:
        status = kl_batched_matmul_cuda(&p, dtype, algo, <void *> stream)
    check_status(status)


def matmul_var(uintptr_t table, int64_t count, int64_t max_order, double alpha, double beta,
               int dtype, int algo, uintptr_t stream):
    """Enqueue the variable-size form; `table` is a device address of count x 15 int64."""
    cdef int status
    with nogil:
        status = kl_batched_matmul_cuda_var(<const void *> table, count, max_order, alpha, beta,
                                            dtype, algo, <void *> stream)
    check_status(status)


def var_table(uintptr_t sizes, int ncols, int64_t count, uintptr_t a, int64_t a_len,
              uintptr_t b, int64_t b_len, uintptr_t c, int64_t c_len, uintptr_t d,
              int64_t d_len, int elem, uintptr_t table, uintptr_t stream):
    """Enqueue the building of the variable form's table (count x 15 int64 at `table`) from a
    size table on the GPU (count x ncols int64 at `sizes`; see batched.h)."""
    cdef int status
    with nogil:
        status = kl_batched_var_table_cuda(<const int64_t *> sizes, ncols, count,
                                           <const void *> a, a_len, <const void *> b, b_len,
                                           <const void *> c, c_len, <void *> d, d_len, elem,
                                           <int64_t *> table, <void *> stream)
    check_status(status)


def current_device():
    """The device this thread's launches go to, asked of the CUDA runtime (whoever made it
    current: torch, CuPy), or -1: a replay's check, ~0.5 us less than torch's current_device."""
    return kl_batched_cuda_current_device()


def float32_mode(int mode=-1):
    """0 = 3xTF32 tensor cores, 1 = IEEE FMAs; sets it when given; returns the previous mode."""
    return kl_batched_float32_mode(mode)


def device_check():
    """RuntimeError when no usable CUDA device (compute capability >= 8.0) is present."""
    if kl_batched_cuda_device_check() != 0:
        raise RuntimeError(kl_last_error().decode())
