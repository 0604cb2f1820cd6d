# cython: language_level=3
"""Thin wrapper of the CUDA Kronecker-sparse kernel: device pointers and a stream handle in."""
from libc.stdint cimport uintptr_t

from .ks_abi cimport fill_problem, kl_ks_matmul_cuda, kl_ks_problem, kl_last_error


def matmul(pattern, batch, int layout, values, x, y, int dtype, stream):
    """Enqueue one factor's product on `stream` (see _ks_cpu.matmul); no synchronisation."""
    cdef kl_ks_problem c
    fill_problem(&c, pattern, batch, layout, values, x, y)
    cdef void *st = <void *> <uintptr_t> stream
    cdef int status
    with nogil:
        status = kl_ks_matmul_cuda(&c, dtype, st)
    if status != 0:
        raise RuntimeError(kl_last_error().decode())
