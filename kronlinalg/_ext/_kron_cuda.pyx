# cython: language_level=3
"""Thin wrapper of the CUDA Kronecker-matmul kernels: device pointers and a stream handle in."""
from .fields cimport (CupyFields, TorchFields, cupy_fields_resolve, cupy_ptr, field_read,
                      torch_fields_resolve)
from .status cimport check_status
from cpython.array cimport array
from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int32_t, int64_t, uintptr_t

import sys

from .kron_abi cimport (fill_packed, fill_problem, kl_cuda_device_check,
                        kl_kron_cuda_scratch_elems, kl_kron_float32_mode, kl_kron_matmul_cuda,
                        kl_kron_problem, kl_last_error, pack_layout)


cdef extern from "kron.h" nogil:
    int kl_kron_cuda_workspace(const kl_kron_problem *p, int dtype, int64_t *elems, int *nbufs)
    int kl_kron_cuda_config(const kl_kron_problem *p, int dtype, char *buf, int len)
    int kl_kron_cuda_tune(int lines, int tile_q, int threads, int smem_budget_kb, int kind)
    void *kl_kron_cuda_bind(const kl_kron_problem *p, int dtype)
    int kl_kron_cuda_launch_bound(const void *bound, const kl_kron_problem *p, int dtype,
                                  void *scratch0, void *scratch1, int64_t scratch_elems,
                                  void *stream)
    void kl_kron_cuda_unbind(void *bound)
    int kl_kron_cuda_current_device()


#: dtype codes of kron.h
DTYPES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3}

# the arrays' pointers, read through their types' descriptors (fields.pxd), resolved by the
# first Replay of each library
cdef TorchFields _tf
cdef CupyFields _cf
cdef int _generation = 0  # bumped when the packed layouts go stale (tune, float32_mode)


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
    global _generation
    kl_kron_cuda_tune(lines, tile_q, threads, smem_budget_kb, kind)
    _layouts.clear()  # their scratch sizes came from the plans before the override
    _generation += 1


def float32_mode(int mode=-1):
    """The float32 mode (0: 3xTF32 tensor cores where every P % 8 == 0, 1: CUDA-core FMAs); sets
    it when mode is 0 or 1; returns the previous one."""
    global _generation
    cdef int prev = kl_kron_float32_mode(mode)
    if mode in (0, 1) and mode != prev:
        _layouts.clear()  # their scratch sizes came from plans of the other mode
        _generation += 1
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


# ---------------------------------------------------------------------------------------------
# the replay of a repeated signature, in one C-level call: a tiny product is host-bound, and
# every Python frame and temporary between the caller and the launch shows in its time


cdef object _call_replay(object replayer, object x, object factors, double alpha):
    return (<Replay> replayer).run(x, factors, alpha)


cdef class Replay:
    """A packed layout (see prepare) bound to one signature — library, dtype, device, result
    shape: a call allocates the result in the caller's library, reads the pointers and enqueues
    the same launches on the caller's current stream.  It returns None (the caller then takes
    the full path) when another device is current or the layouts went stale.

    Scratch of at most keep_bytes is kept per (stream, alignment): calls on one stream run in
    its order, so a later call reuses the buffers only after this call's kernels are done."""

    cdef tuple packed
    cdef array fptrs
    cdef int dtype, device, generation, nfactors
    cdef bint is_cupy, transposed
    cdef tuple alloc_shape
    cdef object ctor, npdtype, current_stream, scratch_empty, template
    cdef int64_t n_aligned, n_unaligned, keep_bytes, itemsize
    cdef int nb_aligned, nb_unaligned
    cdef dict kept
    cdef void *bound_aligned  # the plans, bound once (kl_kron_cuda_bind; NULL: plan per call)
    cdef void *bound_unaligned
    # the compiled fronts' C entry point (_signatures.pyx: "kronlinalg.call_replay")
    cdef readonly object _kl_call_replay

    def __dealloc__(self):
        kl_kron_cuda_unbind(self.bound_aligned)
        kl_kron_cuda_unbind(self.bound_unaligned)

    def __init__(self, tuple entry, bint is_cupy, tuple out_shape, bint transposed, int dtype,
                 int itemsize, int device, ctor, npdtype, current_stream, scratch_empty,
                 int64_t keep_bytes):
        self.packed = entry[0]
        self.n_aligned, self.nb_aligned = entry[1]
        self.n_unaligned, self.nb_unaligned = entry[2]
        self.nfactors = self.packed[2]
        self.fptrs = array('Q', [0] * self.nfactors)
        self.dtype = dtype
        self.itemsize = itemsize
        self.device = device
        self.is_cupy = is_cupy
        self.transposed = transposed
        # a transposed result is a (…, n, K') buffer seen as (…, K', n)
        self.alloc_shape = (out_shape[:-2] + (out_shape[-1], out_shape[-2]) if transposed
                            else out_shape)
        # CuPy: ctor = cupy.ndarray, called (shape, dtype).  torch: ctor(shape) gives the template
        # (common/backend.py replay_template) the results are allocated from by torch.empty_like
        self.template = None
        if is_cupy:
            cupy_fields_resolve(&_cf, ctor, sys.modules["cupy"].cuda.MemoryPointer)
        else:
            self.template = ctor(self.alloc_shape)
            torch_fields_resolve(&_tf, sys.modules["torch"].Tensor)
            ctor = sys.modules["torch"].empty_like
        self.ctor = ctor
        self.npdtype = npdtype
        self.current_stream = current_stream
        self.scratch_empty = scratch_empty
        self.keep_bytes = keep_bytes
        self.kept = {}
        self.generation = _generation
        cdef kl_kron_problem c
        fill_packed(&c, self.packed, None, 0, 0, 1.0, 0.0)
        self.bound_aligned = kl_kron_cuda_bind(&c, dtype)
        fill_packed(&c, self.packed, None, 4, 4, 1.0, 0.0)
        self.bound_unaligned = kl_kron_cuda_bind(&c, dtype)
        self._kl_call_replay = PyCapsule_New(<void *> _call_replay, b"kronlinalg.call_replay",
                                             NULL)

    def __call__(self, x, factors, *, side="right", double alpha=1.0, beta=0.0, y=None):
        # (the signature fixed side, beta == 0 and y is None: they are not read)
        return self.run(x, factors, alpha)

    cdef object run(self, x, factors, double alpha):
        # (the device the launches go to, asked of the CUDA runtime: ~0.5 us less than torch's
        # current_device(), and it is the context the kernels are enqueued in whoever set it)
        if self.generation != _generation or kl_kron_cuda_current_device() != self.device:
            return None
        cdef Py_ssize_t i
        cdef uintptr_t xptr, yptr
        if len(factors) != self.nfactors:
            return None
        if self.is_cupy:
            out = self.ctor(self.alloc_shape, self.npdtype)
            xptr = cupy_ptr(&_cf, x)
            yptr = cupy_ptr(&_cf, out)
            for i in range(self.nfactors):
                self.fptrs.data.as_ulonglongs[i] = cupy_ptr(&_cf, factors[i])
        else:
            out = self.ctor(self.template)
            xptr = field_read(&_tf.data_ptr, x)
            yptr = field_read(&_tf.data_ptr, out)
            for i in range(self.nfactors):
                self.fptrs.data.as_ulonglongs[i] = field_read(&_tf.data_ptr, factors[i])
        cdef bint aligned = (xptr | yptr) % 16 == 0
        cdef int64_t n = self.n_aligned if aligned else self.n_unaligned
        cdef int nbuf = self.nb_aligned if aligned else self.nb_unaligned
        cdef uintptr_t stream = self.current_stream(self.device)
        cdef uintptr_t s0 = 0, s1 = 0
        scratch = None
        if nbuf:
            key = (stream, aligned)
            scratch = self.kept.get(key)
            if scratch is None:
                bufs = [self.scratch_empty(x, n) for _ in range(nbuf)]
                ptrs = [b.data.ptr if self.is_cupy else b.data_ptr() for b in bufs] + [0]
                scratch = (ptrs[0], ptrs[1], bufs)
                if n * nbuf * self.itemsize <= self.keep_bytes:
                    self.kept[key] = scratch
            s0 = scratch[0]
            s1 = scratch[1]
        cdef kl_kron_problem c
        fill_packed(&c, self.packed, self.fptrs, xptr, yptr, alpha, 0.0)
        cdef int status
        cdef int dtype = self.dtype
        cdef void *bound = self.bound_aligned if aligned else self.bound_unaligned
        with nogil:
            if bound != NULL:
                status = kl_kron_cuda_launch_bound(bound, &c, dtype, <void *> s0, <void *> s1, n,
                                                   <void *> stream)
            else:
                status = kl_kron_matmul_cuda(&c, dtype, <void *> s0, <void *> s1, n,
                                             <void *> stream)
        check_status(status)
        return out.swapaxes(-1, -2) if self.transposed else out
