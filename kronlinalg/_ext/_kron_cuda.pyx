# cython: language_level=3
"""Thin wrapper of the CUDA Kronecker-matmul kernels: device pointers and a stream handle in."""
from .status cimport check_status
from cpython.array cimport array
from libc.stdint cimport int32_t, int64_t, uintptr_t

from .kron_abi cimport (fill_packed, fill_problem, kl_cuda_device_check,
                        kl_kron_cuda_scratch_elems, kl_kron_float32_mode, kl_kron_matmul_cuda,
                        kl_kron_problem, kl_last_error, pack_layout)


cdef extern from "kron.h" nogil:
    int kl_kron_cuda_workspace(const kl_kron_problem *p, int dtype, int64_t *elems, int *nbufs)
    int kl_kron_cuda_config(const kl_kron_problem *p, int dtype, char *buf, int len)
    int kl_kron_cuda_tune(int lines, int tile_q, int threads, int smem_budget_kb, int kind)


#: dtype codes of kron.h
DTYPES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3}


def device_check():
    """Raise RuntimeError('no GPU: ...') unless a CUDA device is usable."""
    check_status(kl_cuda_device_check())


def scratch_elems(m1, m2, factors):
    """Elements each of the two scratch buffers must hold (dtype-independent upper bound)."""
    cdef kl_kron_problem c
    cdef tuple keep = fill_problem(&c, m1, m2, factors, (1, 0, 0, 1), (1, 0, 0, 1),
                                            1.0, 0.0, 0)
    return kl_kron_cuda_scratch_elems(&c)


cdef tuple _workspace(kl_kron_problem *c, int dtype):
    """(elements, number of buffers) of scratch the CUDA plan of *c needs."""
    cdef int64_t elems = 0
    cdef int nbufs = 0
    cdef int status
    with nogil:
        status = kl_kron_cuda_workspace(c, dtype, &elems, &nbufs)
    check_status(status)
    return elems, nbufs


def workspace(m1, m2, factors, x, int dtype, int max_fused=0):
    """(elements, number of buffers) of scratch the CUDA plan needs for x's layout and dtype."""
    cdef kl_kron_problem c
    cdef tuple keep = fill_problem(&c, m1, m2, factors, x, (1, 0, 0, 1), 1.0, 0.0, max_fused)
    return _workspace(&c, dtype)


def config(m1, m2, factors, x, y, int dtype, int max_fused=0):
    """The plan (passes, kernels, tiles, grid) the CUDA path picks for this problem, as text."""
    cdef kl_kron_problem c
    cdef tuple keep = fill_problem(&c, m1, m2, factors, x, y, 1.0, 0.0, max_fused)
    cdef bytearray buf = bytearray(4096)
    cdef char *p = buf
    cdef int status
    with nogil:
        status = kl_kron_cuda_config(&c, dtype, p, 4096)
    check_status(status)
    return bytes(buf).split(b"\0", 1)[0].decode()


def tune(int lines=0, int tile_q=0, int threads=0, int smem_budget_kb=0, int kind=-1):
    """Override the planner for benchmarks (0 / -1 = automatic); tune() resets."""
    kl_kron_cuda_tune(lines, tile_q, threads, smem_budget_kb, kind)
    _layouts.clear()  # their scratch sizes came from the plans before the override


def float32_mode(int mode=-1):
    """The float32 mode (0: 3xTF32 tensor cores where every P % 8 == 0, 1: CUDA-core FMAs); sets
    it when mode is 0 or 1; returns the previous one."""
    cdef int prev = kl_kron_float32_mode(mode)
    if mode in (0, 1) and mode != prev:
        _layouts.clear()  # their scratch sizes came from plans of the other mode
    return prev


def matmul(m1, m2, factors, x, y, double alpha, double beta, int dtype, scratch0, scratch1,
           stream, int max_fused=0, int64_t scratch_elems=-1):
    """Enqueue Y = alpha * X @ kron(F) + beta * Y on `stream`; no synchronisation (scratch_elems:
    the scratch buffers' size, checked against the plan's need where >= 0)."""
    cdef kl_kron_problem c
    cdef tuple keep = fill_problem(&c, m1, m2, factors, x, y, alpha, beta, max_fused)
    cdef void *s0 = <void *> <uintptr_t> scratch0
    cdef void *s1 = <void *> <uintptr_t> scratch1
    cdef void *st = <void *> <uintptr_t> stream
    cdef int status
    with nogil:
        status = kl_kron_matmul_cuda(&c, dtype, s0, s1, scratch_elems, st)
    check_status(status)


# ---------------------------------------------------------------------------------------------
# the per-call fast path: shapes and strides packed once per layout, pointers per call

_layouts = {}


def layout(key):
    """The packed layout cached under `key` (see prepare), or None."""
    return _layouts.get(key)


def prepare(key, m1, m2, factors, x, y, int dtype, contiguous):
    """Pack a problem's shapes and strides (factors: (P, Q, row stride, col stride); x, y:
    (row stride 1, row stride 2, element stride)), plan it, cache and return
    (packed, scratch, scratch_unaligned, contiguous): scratch as (elements, buffers) for x and
    y both 16-byte aligned, and for any other pointers (the plans may group the factors
    otherwise: the natural-order kernel needs aligned rows)."""
    cdef kl_kron_problem c
    packed = pack_layout(m1, m2, factors, x, y)
    fill_packed(&c, packed, None, 0, 0, 1.0, 0.0)
    aligned = _workspace(&c, dtype)
    fill_packed(&c, packed, None, 4, 4, 1.0, 0.0)
    entry = (packed, aligned, _workspace(&c, dtype), bool(contiguous))
    if len(_layouts) > 4096:
        _layouts.clear()
    _layouts[key] = entry
    return entry


def launch(tuple packed, fptrs, uintptr_t xptr, uintptr_t yptr, double alpha, double beta,
           int dtype, uintptr_t scratch0, uintptr_t scratch1, int64_t scratch_elems,
           uintptr_t stream):
    """Enqueue a packed problem (prepare) on `stream` with these pointers and scratch buffers of
    scratch_elems elements each; no synchronisation."""
    cdef kl_kron_problem c
    cdef array ptrs = array('Q', fptrs)
    fill_packed(&c, packed, ptrs, xptr, yptr, alpha, beta)
    cdef int status
    with nogil:
        status = kl_kron_matmul_cuda(&c, dtype, <void *> scratch0, <void *> scratch1,
                                     scratch_elems, <void *> stream)
    check_status(status)
