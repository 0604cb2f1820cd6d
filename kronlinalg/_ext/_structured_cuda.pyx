# cython: language_level=3
"""Thin wrapper of the CUDA Kronecker-sparse kernel: device pointers and a stream handle in."""
from .fields cimport (CupyFields, TorchFields, cupy_fields_resolve, cupy_ptr, field_read,
                      torch_fields_resolve)
from .status cimport check_status
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t, uintptr_t

import sys

from .structured_abi cimport (factor_chain, fill_problem, kl_ks_cuda_current_device,
                             kl_ks_cuda_tile, kl_ks_dense_slabs_cuda, kl_ks_float32_mode,
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
    check_status(status)


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
    check_status(status)


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
    check_status(status)


def float32_mode(int mode=-1):
    """The kernel's float32 mode (0: 3xTF32 tensor cores, 1: CUDA-core FMAs); sets it when
    mode is 0 or 1; returns the previous one."""
    return kl_ks_float32_mode(mode)


def tile(pattern, int64_t batch, int layout, int dtype, int units):
    """(TN, TK, TL, TJ, kind): the tile `matmul` would launch for one factor of `pattern` on
    `batch` rows (layout 0 batch_first, 1 batch_last; dtype 0 float32, 2 float16, 3 bfloat16;
    x and y contiguous, aligned), asked of the launcher itself (ks.h kl_ks_cuda_tile: no launch,
    no GPU) in the current float32 mode.  kind: 0 the one-stage kernels (float32 FFMA, half-type
    mma.sync), 1 the pipelined tensor-core kernel (float32 as 3xTF32), 2 the natural-layout
    kernel, 3 the wgmma shapes.  units > 0: a device of that many SMs without wgmma; units < 0:
    -units SMs of an sm_90 (wgmma where built); 0: the current device."""
    a, b, c, d = pattern
    first = layout == 0
    cdef int64_t x_ld = a * c * d if first else batch
    cdef int64_t y_ld = a * b * d if first else batch
    cdef kl_ks_problem p
    fill_problem(&p, pattern, batch, layout, (0, b * c * d, c * d, d, 1), (0, x_ld), (0, y_ld))
    cdef int64_t out[5]
    cdef int status
    with nogil:
        status = kl_ks_cuda_tile(&p, dtype, units, out)
    check_status(status)
    return (out[0], out[1], out[2], out[3], out[4])


# -- the public call's first step, compiled (structured_matmul's fast path, CUDA and NumPy) ----

from kronlinalg._ext._signatures import arrays_signature, call_memo, remembered


# the arrays' pointers, read through their types' descriptors (fields.pxd), resolved by the
# first ChainReplay of each library
cdef TorchFields _tf
cdef CupyFields _cf

cdef class ChainFront:
    """What chain_call needs: the operation whose full path runs on a miss, its per-signature
    cache, and the exact operand types (KSFactor, KSChain, KSPacked) it unpacks."""

    cdef readonly object operation, cache, factor_type, chain_type, packed_type
    # the last call replayed, (its arrays and options as a _signatures call memo, the type of
    # its factors argument, its patterns), swapped whole (threads read one consistent tuple):
    # a repeat is compared field by field, no key tuples built or hashed (~1 us of a torch
    # call on an H100's host)
    cdef tuple memo

    def __init__(self, operation, cache, factor_type, chain_type, packed_type):
        self.operation = operation
        self.cache = cache
        self.factor_type = factor_type
        self.chain_type = chain_type
        self.packed_type = packed_type
        self.memo = None


def chain_call(ChainFront front, x, factors, layout, algorithm):
    """``front.operation(x, factors, layout=…, algorithm=…)``, replayed without a Python frame of
    the skeleton when factors is a KSFactor, KSChain, KSPacked or list/tuple of KSFactor (exact
    types) whose key — the operation's own: (layout, algorithm, packed, arrays' keys, patterns)
    — was remembered; anything else, or a replay that answers None, takes the full path."""
    cdef object tf = type(factors), chain = None, ft = front.factor_type
    cdef bint packed = False
    if tf is ft:
        chain = (factors,)
    elif tf is front.chain_type:
        chain = factors.factors
    elif tf is front.packed_type:
        chain = factors.factors
        packed = True
    elif tf is list or tf is tuple:
        for f in factors:
            if type(f) is not ft:
                break
        else:
            chain = factors
    if chain is not None:
        values = [f.values for f in chain]
        patterns = tuple([f.pattern for f in chain])
        memo = front.memo
        if (memo is not None and tf is memo[1] and patterns == memo[2]
                and memo[0].repeats(front.cache, layout, algorithm, x, values)):
            replayer = memo[0].replayer
            if type(replayer) is ChainReplay:  # (no keyword call: ~0.15-0.3 us)
                out = (<ChainReplay> replayer).run(x, factors)
            else:
                out = replayer(x, factors, layout=layout)
            if out is not None:
                return out
            front.memo = None  # (stale: the key path below decides)
        sig = arrays_signature([x] + values, True)  # (NumPy too: the CPU kernel's replays)
        if sig is not None:
            entries = front.cache.entries
            replayer = remembered(front.cache, (layout, algorithm, packed, sig, patterns))
            if replayer is not None:
                out = replayer(x, factors, layout=layout)
                if out is not None:
                    front.memo = (call_memo(entries, replayer, layout, algorithm, sig), tf,
                                  patterns)
                    return out
    return front.operation(x, factors, layout=layout, algorithm=algorithm)


cdef struct _Step:
    # one factor's launch of a replay: pattern, values strides (elements), x's leading dim, and
    # the result's 2D shape (rows, leading dim) of this step
    int64_t a, b, c, d
    int64_t vs[4]
    int64_t x_ld, out_rows, out_ld


cdef class ChainReplay:
    """The CUDA kernel's launches of a structured_matmul call again, for arrays of the same
    signature (the operation's replayer, called ``(x, factors, layout=…)``): one launch per
    factor, last factor first, through pointers — x's rows are x's memory, each intermediate a
    flat buffer, the last result allocated in the result's shape — so no array view is made and
    no Python frame runs: a tiny product is host-bound.  None (the full path, which switches
    devices) when another GPU than x's is current, or for a chain of another length.

    alloc: CuPy, cupy.ndarray (called (shape, dtype)); torch, alloc(shape) gives the template
    (common/backend.py replay_template) each step's result is allocated from by
    torch.empty_like."""

    cdef _Step *steps
    cdef int nsteps, layout, dtype, device
    cdef int64_t rows
    cdef bint is_cupy
    cdef tuple out_shape
    cdef list shapes, templates
    cdef object ndarray, npdtype, empty_like, stream_of, factor_type, chain_type

    def __cinit__(self):
        self.steps = NULL

    def __dealloc__(self):
        PyMem_Free(self.steps)

    def __init__(self, int64_t rows, int layout, int dtype, tuple out_shape, steps, alloc,
                 bint is_cupy, npdtype, int device, stream_of, factor_type, chain_type):
        cdef int i
        self.nsteps = len(steps)
        self.steps = <_Step *> PyMem_Malloc(max(self.nsteps, 1) * sizeof(_Step))
        if self.steps == NULL:
            raise MemoryError()
        self.rows, self.layout, self.dtype, self.device = rows, layout, dtype, device
        self.out_shape = out_shape
        self.is_cupy = is_cupy
        self.stream_of = stream_of
        self.factor_type, self.chain_type = factor_type, chain_type
        self.shapes, self.templates = [], []
        for i, (pattern, vstrides, ld, out_2d) in enumerate(steps):
            st = &self.steps[i]
            st.a, st.b, st.c, st.d = pattern
            st.vs[0], st.vs[1], st.vs[2], st.vs[3] = vstrides
            st.x_ld = ld
            st.out_rows, st.out_ld = out_2d
            shape = out_shape if i == self.nsteps - 1 else (st.out_rows * st.out_ld,)
            self.shapes.append(shape)
            self.templates.append(None if is_cupy else alloc(shape))
        if is_cupy:
            self.ndarray, self.npdtype = alloc, npdtype
            cupy_fields_resolve(&_cf, alloc, sys.modules["cupy"].cuda.MemoryPointer)
        else:
            self.empty_like = sys.modules["torch"].empty_like
            torch_fields_resolve(&_tf, sys.modules["torch"].Tensor)

    cdef object _empty(self, x, int i):
        if self.is_cupy:
            return self.ndarray(self.shapes[i], self.npdtype)
        return self.empty_like(self.templates[i])

    def __call__(self, x, factors, *, layout="batch_first"):
        # (the signature fixed the layout, the patterns and the arrays' layouts: not read again)
        return self.run(x, factors)

    cdef object run(self, x, factors):
        # (the device the launches go to, asked of the CUDA runtime: ~0.5 us less than torch's)
        if kl_ks_cuda_current_device() != self.device:
            return None
        chain = factor_chain(factors, self.factor_type, self.chain_type)
        cdef int n = self.nsteps, i
        if len(chain) != n:
            return None
        cdef uintptr_t stream = self.stream_of(self.device)
        cdef bint cupy = self.is_cupy
        cdef uintptr_t src = cupy_ptr(&_cf, x) if cupy else field_read(&_tf.data_ptr, x)
        cdef uintptr_t dst, vptr
        cdef kl_ks_problem c
        cdef _Step *st
        cdef int status
        prev = None
        out = None
        for i in range(n):
            values = chain[n - 1 - i].values
            vptr = cupy_ptr(&_cf, values) if cupy else field_read(&_tf.data_ptr, values)
            out = self._empty(x, i)
            dst = cupy_ptr(&_cf, out) if cupy else field_read(&_tf.data_ptr, out)
            st = &self.steps[i]
            c.a, c.b, c.c, c.d = st.a, st.b, st.c, st.d
            c.batch = self.rows
            c.layout = self.layout
            c.values = <const void *> vptr
            c.vs[0], c.vs[1], c.vs[2], c.vs[3] = st.vs[0], st.vs[1], st.vs[2], st.vs[3]
            c.x = <const void *> src
            c.x_ld = st.x_ld
            c.y = <void *> dst
            c.y_ld = st.out_ld
            with nogil:
                status = kl_ks_matmul_cuda(&c, self.dtype, <void *> stream)
            check_status(status)
            # (the previous intermediate is released once this launch, which reads it, is
            # enqueued: the pools are stream-ordered)
            prev = out
            src = dst
        return out
