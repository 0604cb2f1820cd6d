# cython: language_level=3
"""Thin wrapper of the CUDA Kronecker-matmul kernel: device pointers and a stream handle in."""
from libc.stdint cimport uintptr_t

from .kron_abi cimport (fill_problem, kl_cuda_device_check, kl_kron_cuda_scratch_elems,
                        kl_kron_matmul_cuda, kl_kron_problem, kl_last_error)


def device_check():
    """Raise RuntimeError('no GPU: ...') unless a CUDA device is usable."""
    if kl_cuda_device_check() != 0:
        raise RuntimeError(kl_last_error().decode())


def scratch_elems(m1, m2, factors):
    """Elements each of the two scratch buffers must hold."""
    cdef kl_kron_problem c
    cdef tuple keep = fill_problem(&c, m1, m2, factors, (1, 0, 0, 1), (1, 0, 0, 1),
                                            1.0, 0.0, 0)
    return kl_kron_cuda_scratch_elems(&c)


def matmul(m1, m2, factors, x, y, double alpha, double beta, int dtype, scratch0, scratch1,
           stream):
    """Enqueue Y = alpha * X @ kron(F) + beta * Y on `stream`; no synchronisation."""
    cdef kl_kron_problem c
    cdef tuple keep = fill_problem(&c, m1, m2, factors, x, y, alpha, beta, 0)
    cdef void *s0 = <void *> <uintptr_t> scratch0
    cdef void *s1 = <void *> <uintptr_t> scratch1
    cdef void *st = <void *> <uintptr_t> stream
    cdef int status
    with nogil:
        status = kl_kron_matmul_cuda(&c, dtype, s0, s1, st)
    if status != 0:
        raise RuntimeError(kl_last_error().decode())
