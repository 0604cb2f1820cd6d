# cython: language_level=3
"""Thin wrapper of the CPU batched-matmul kernel: pointers, shapes, strides in; status out."""
from .status cimport check_status
from libc.stdint cimport int64_t, uintptr_t

from .batched_abi cimport (KL_BATCHED_MAX_DIMS, config_dict, fill_problem, kl_batched_config,
                           kl_batched_cuda_config,
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


# ---------------------------------------------------------------------------------------------
# The compiled replay of a repeated NumPy stack (batched_matmul's and matmul's fast path): the
# problem's strides fixed once, a repeat only fills in the three addresses and allocates the
# result through NumPy's C API.  A call of a tiny stack is host-bound (NumPy's own matmul takes
# ~0.8 us at batch 4): the Python replayer this replaces spent ~1.5 us in np.empty, the
# operand tuples and __array_interface__ reads.

from cpython.pycapsule cimport PyCapsule_New

cdef extern from *:
    """
    #define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
    #define PY_ARRAY_UNIQUE_SYMBOL kl_batched_cpu_ARRAY_API
    #include <numpy/arrayobject.h>
    """
    ctypedef struct PyArrayObject:
        pass
    ctypedef Py_ssize_t npy_intp
    int NPY_ARRAY_ALIGNED
    int NPY_DOUBLE
    int NPY_FLOAT
    int _import_array() except -1
    object PyArray_SimpleNew(int nd, npy_intp *dims, int typenum)
    void *PyArray_DATA(PyArrayObject *arr)
    int PyArray_FLAGS(PyArrayObject *arr)

_import_array()

import numpy as np

cdef object _ndarray = np.ndarray
cdef object _KERNEL_DTYPES = {np.dtype(np.float32): (0, NPY_FLOAT),
                              np.dtype(np.float64): (1, NPY_DOUBLE)}

# The front's protocol (kronlinalg/_ext/_signatures.pyx): a replayer whose `_kl_pair_replay` is
# a capsule of this name holds `object fn(object replayer, object a, object b, double alpha)`,
# called for a NumPy pair the front has checked repeats the remembered one (exact ndarrays of
# the same dimensions, strides and dtype objects); it returns the result or None (declined).
cdef const char *_CAPSULE = b"kronlinalg.pair_replay"
cdef enum:
    _OUT_NDIM = 32  # NumPy's own limit (NPY_MAXDIMS in NumPy 1.x)
# From this many flops the kernel runs without the GIL (below it the release and re-take cost
# more than the product: ~0.1 us).
cdef double _NOGIL_FLOPS = 2e5


cdef class StackReplay:
    """One signature's launch: strides and batch shape fixed, addresses per call.  Immutable
    (a call copies the template), so threads may share it."""

    cdef kl_batched_problem tmpl
    cdef int code, typenum, out_nd
    cdef npy_intp out_dims[_OUT_NDIM]
    cdef bint nogil_run
    cdef readonly object _kl_pair_replay

    cdef object run(self, a, b, double alpha):
        # an unaligned view of the same strides (a repeat of a signature does not say) takes
        # the full path, which copies it
        if (not PyArray_FLAGS(<PyArrayObject *> a) & NPY_ARRAY_ALIGNED
                or not PyArray_FLAGS(<PyArrayObject *> b) & NPY_ARRAY_ALIGNED):
            return None
        return self.run_at(PyArray_DATA(<PyArrayObject *> a), PyArray_DATA(<PyArrayObject *> b),
                           alpha)

    cdef object run_at(self, void *a, void *b, double alpha):
        """The kernel on operands at a and b, into a new NumPy result."""
        out = PyArray_SimpleNew(self.out_nd, self.out_dims, self.typenum)
        cdef kl_batched_problem p = self.tmpl
        p.a = a
        p.b = b
        p.d = PyArray_DATA(<PyArrayObject *> out)
        p.alpha = alpha
        cdef int status
        if self.nogil_run:
            with nogil:
                status = kl_batched_matmul_cpu(&p, self.code, 0)
        else:
            status = kl_batched_matmul_cpu(&p, self.code, 0)
        check_status(status)
        return out

    def run_addresses(self, uintptr_t a, uintptr_t b, double alpha):
        """The replay on operands given by address (CPU torch tensors: no NumPy view to make;
        the caller has checked their signature, sign and alignment): a new NumPy result."""
        return self.run_at(<void *> a, <void *> b, alpha)

    def __call__(self, a, b, /, *, alpha=1.0, beta=0.0, c=None, **rest):
        """The replayer protocol of kronlinalg/_operation.py: the result, or None for a call
        this replay does not cover (c, beta, an alpha that is not a plain number, options)."""
        if (c is not None or beta != 0 or type(alpha) not in (float, int)
                or type(a) is not _ndarray or type(b) is not _ndarray):
            return None
        for v in rest.values():
            if v is not None:
                return None
        return self.run(a, b, float(alpha))


cdef object _pair_replay(object replayer, object a, object b, double alpha):
    return (<StackReplay> replayer).run(a, b, alpha)


def _element_strides(x):
    item = x.itemsize
    if any(s % item for s in x.strides):
        return None
    return [s // item for s in x.strides]


def _operand(shape, strides, batch, rows, cols):
    """(batch strides, row stride, column stride) of an operand against the result's batch
    shape and its (rows, cols): 0 wherever it broadcasts (kronlinalg/batched.py's _operand)."""
    nd = len(shape)

    def stride(axis, size):  # axis counted from the end
        if axis > nd or shape[nd - axis] != size or size == 1:
            return 0
        return strides[nd - axis]

    return ([stride(len(batch) - i + 2, batch[i]) for i in range(len(batch))],
            stride(2, rows), stride(1, cols))


def merge_batch(batch, strides):
    """The batch dimensions of a stack of strided operands as the kernels take them: those of
    size 1 dropped, neighbours merged where every operand allows it (its outer stride is its
    inner one times the inner size).  strides: per operand, a stride for each batch dimension.
    (sizes, per operand its strides), or None when more than the kernels' KL_BATCHED_MAX_DIMS
    remain.  The launch description (kronlinalg/batched.py) and the replay below share it."""
    dims = [[size] + [s[i] for s in strides] for i, size in enumerate(batch) if size != 1]
    merged = []
    for d in dims:
        if merged and all(merged[-1][j] == d[j] * d[0] for j in range(1, len(d))):
            merged[-1] = [merged[-1][0] * d[0]] + d[1:]
        else:
            merged.append(d)
    if len(merged) > KL_BATCHED_MAX_DIMS:
        return None
    return [d[0] for d in merged], [[d[j + 1] for d in merged] for j in range(len(strides))]


def stack_replayer(a, b, out):
    """A StackReplay for calls repeating (a, b) whose result was `out` (a fresh C-contiguous
    array): exact NumPy stacks (at least 2-D) of one kernel dtype (float32/float64), native and
    aligned, with whole-element strides, at most 8 batch dimensions once merged; else None."""
    if type(a) is not _ndarray or type(b) is not _ndarray or type(out) is not _ndarray:
        return None
    kinds = _KERNEL_DTYPES.get(a.dtype)
    if (kinds is None or b.dtype != a.dtype or out.dtype != a.dtype or a.ndim < 2 or b.ndim < 2
            or out.ndim > _OUT_NDIM or not (a.flags.aligned and b.flags.aligned)
            or not out.flags.c_contiguous):
        return None
    sa, sb, so = _element_strides(a), _element_strides(b), _element_strides(out)
    if sa is None or sb is None or so is None:
        return None
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = tuple(out.shape[:-2])
    if b.shape[-2] != k or tuple(out.shape[-2:]) != (m, n):
        return None
    ops = [_operand(a.shape, sa, batch, m, k), _operand(b.shape, sb, batch, k, n),
           ([0] * len(batch), 0, 0), _operand(out.shape, so, batch, m, n)]
    got = merge_batch(batch, [op[0] for op in ops])
    if got is None:
        return None
    sizes, per_op = got
    cdef StackReplay r = StackReplay.__new__(StackReplay)
    ad, bd, cd, od = [(0, per_op[j], op[1], op[2]) for j, op in enumerate(ops)]
    fill_problem(&r.tmpl, m, n, k, sizes, ad, bd, cd, od, 1.0, 0.0)
    r.code, r.typenum = kinds
    r.out_nd = out.ndim
    cdef int i
    for i in range(out.ndim):
        r.out_dims[i] = out.shape[i]
    count = 1
    for size in sizes:
        count *= size
    r.nogil_run = 2.0 * count * m * n * k >= _NOGIL_FLOPS
    r._kl_pair_replay = PyCapsule_New(<void *> _pair_replay, _CAPSULE, NULL)
    return r
