# cython: language_level=3
"""Thin wrapper of the CUDA Kronecker-sparse kernel: device pointers and a stream handle in."""
from libc.stdint cimport int64_t, uintptr_t

from .structured_abi cimport (fill_problem, kl_ks_dense_slabs_cuda, kl_ks_float32_mode,
                      kl_ks_matmul_cuda, kl_ks_planar_cuda, kl_ks_problem,
                      kl_ks_transpose_values_cuda, kl_last_error)


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


def transpose_values(pattern, values, out, int dtype, stream):
    """Enqueue the copy of contiguous values (ptr, strides) of `pattern` to out (a pointer) in
    (a, d, b, c) order on `stream`; no synchronisation."""
    _copy_values(0, pattern, values, out, dtype, stream)


def dense_slabs(pattern, values, out, int dtype, stream):
    """Enqueue the copy of contiguous values (ptr, strides) of `pattern` to out (a pointer) as
    the factor's a dense diagonal blocks, (a, b·d, c·d), on `stream`; no synchronisation."""
    _copy_values(1, pattern, values, out, dtype, stream)


cdef _copy_values(int dense, pattern, values, out, int dtype, stream):
    cdef kl_ks_problem c
    fill_problem(&c, pattern, 0, 0, values, (0, 0), (0, 0))
    cdef void *dst = <void *> <uintptr_t> out
    cdef void *st = <void *> <uintptr_t> stream
    cdef int status
    with nogil:
        if dense:
            status = kl_ks_dense_slabs_cuda(&c, dst, dtype, st)
        else:
            status = kl_ks_transpose_values_cuda(&c, dst, dtype, st)
    if status != 0:
        raise RuntimeError(kl_last_error().decode())


def planar(bint split, int64_t batch, int64_t a, int64_t n, int64_t d, src, dst, int64_t ld,
           int dtype, stream):
    """Enqueue a planar copy on `stream` (ks.h kl_ks_planar_cuda): split, rows of pitch `ld`
    holding (a, n, d) each -> (a, d, batch, n); else the reverse.  No synchronisation."""
    cdef const void *s = <const void *> <uintptr_t> src
    cdef void *t = <void *> <uintptr_t> dst
    cdef void *st = <void *> <uintptr_t> stream
    cdef int status
    with nogil:
        status = kl_ks_planar_cuda(split, batch, a, n, d, s, t, ld, dtype, st)
    if status != 0:
        raise RuntimeError(kl_last_error().decode())


def float32_mode(int mode=-1):
    """The kernel's float32 mode (0: 3xTF32 tensor cores, 1: CUDA-core FMAs); sets it when
    mode is 0 or 1; returns the previous one."""
    return kl_ks_float32_mode(mode)
