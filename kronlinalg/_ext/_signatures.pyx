# cython: language_level=3
"""The keys of a repeated call's arrays, read on every call of every operation's fast path
(kronlinalg/common/signatures.py), compiled: a tiny product is host-bound."""

import sys

import numpy as np

from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid

from .fields cimport (CupyFields, TorchFields, cupy_fields_resolve, field_read,
                      torch_fields_resolve)

cdef extern from *:
    """
    #define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
    #include <numpy/ndarraytypes.h>
    """
    # NumPy's inline accessors of an array's fields (no API table: no import_array needed),
    # declared with NumPy's own types (GCC 14 rejects implicit pointer conversions)
    ctypedef struct PyArrayObject:
        pass
    ctypedef struct PyArray_Descr:
        pass
    ctypedef Py_ssize_t npy_intp
    int PyArray_NDIM(PyArrayObject *arr)
    npy_intp *PyArray_DIMS(PyArrayObject *arr)
    npy_intp *PyArray_STRIDES(PyArrayObject *arr)
    PyArray_Descr *PyArray_DESCR(PyArrayObject *arr)

cdef object _ndarray = np.ndarray
cdef object _cupy_ndarray = None  # resolved once CuPy is imported
cdef object _torch_tensor = None
cdef object _functorch_level = None  # torch._C._functorch.maybe_current_level, if torch has it
cdef TorchFields _tf  # a torch.Tensor's reads, resolved with _torch_tensor (fields.pxd)
cdef CupyFields _cf  # a cupy.ndarray's reads, resolved with _cupy_ndarray


cpdef arrays_signature(arrays, bint host, bint torch_cpu=False):
    """Tuple of the arrays' keys — (type, shape, strides, dtype, device) for CuPy arrays and CUDA
    torch tensors that need no autograd, (type, shape, strides, dtype) with host=True for NumPy
    arrays and, with torch_cpu=True, (type, shape, strides, dtype, -1) for CPU torch tensors
    that need no autograd (a contiguous tensor's strides: True) — all of one library and device
    kind (exact types, no subclasses); None for anything else.  The library is resolved once,
    from the first array; each array costs its attribute reads."""
    global _cupy_ndarray, _torch_tensor, _functorch_level
    if not arrays:
        return None
    t = type(arrays[0])
    cdef list keys = []
    if t is _ndarray:
        if not host:
            return None
        for a in arrays:
            if type(a) is not t:
                return None
            keys.append((t, a.shape, a.strides, a.dtype))
        return tuple(keys)
    if _cupy_ndarray is None:
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            cupy_fields_resolve(&_cf, cupy.ndarray, cupy.cuda.MemoryPointer)
            _cupy_ndarray = cupy.ndarray
    if t is _cupy_ndarray:
        for a in arrays:
            if type(a) is not t:
                return None
            keys.append((t, field_read(&_cf.shape, a), field_read(&_cf.strides, a),
                         field_read(&_cf.dtype, a), _cupy_device(a)))
        return tuple(keys)
    if _torch_tensor is None:
        torch = sys.modules.get("torch")
        if torch is not None:
            # (the reads resolved before the type is published: another thread that sees
            # _torch_tensor set finds them ready)
            torch_fields_resolve(&_tf, torch.Tensor)
            _torch_tensor = torch.Tensor
            _functorch_level = getattr(getattr(torch._C, "_functorch", None),
                                       "maybe_current_level", None)
    if t is _torch_tensor:
        # inside torch.func's grad/vmap the tensors are wrappers of the same Python type (and
        # per-example shape), without storage of their own: never a replay's (the full path
        # sees the transform and runs an algorithm torch can see through)
        if _functorch_level is not None and _functorch_level() is not None:
            return None
        cuda = arrays[0].is_cuda
        if not cuda and not torch_cpu:
            return None
        for a in arrays:
            if type(a) is not t or field_read(&_tf.requires_grad, a):
                return None
            # (-1 on the CPU: one read tells the device kind too)
            device = field_read(&_tf.get_device, a)
            if (device >= 0) != cuda:
                return None
            # a contiguous tensor's key says so instead of its strides (is_contiguous costs
            # ~0.1 us less than stride() a tensor): every tensor torch calls contiguous has the
            # same element offsets as the others of its shape (it ignores only the strides of
            # size-1 dimensions, which never multiply a valid index, and of empty tensors)
            keys.append((t, field_read(&_tf.shape, a),
                         True if field_read(&_tf.is_contiguous, a) else a.stride(),
                         field_read(&_tf.dtype, a), device))
        return tuple(keys)
    return None


cdef inline object _cupy_device(a):
    """a.data.device_id"""
    return field_read(&_cf.device_id, field_read(&_cf.data, a))


cdef object _EXACT = 2 ** 53  # ints beyond it: the full path (validation) judges them


cdef enum:
    _MEMO_NDIM = 8  # the memo holds arrays of up to this many dimensions

# A replayer may offer the pair memo a C entry point (kronlinalg/_ext/_batched_cpu.pyx's
# StackReplay does): its `_kl_pair_replay` a capsule of this name holding
# `object fn(object replayer, object a, object b, double alpha)`, called for a pair the memo has
# checked (the result, or None to decline).  A repeat then runs without a Python call.
ctypedef object (*_pair_replay_fn)(object, object, object, double)
cdef const char *_PAIR_CAPSULE = b"kronlinalg.pair_replay"
# The call memo's the same way (kronlinalg/_ext/_kron_cuda.pyx's Replay): `_kl_call_replay`, a
# capsule of this name holding the same function type, called fn(replayer, x, factors, alpha)
# for a call whose arrays and options the memo has checked (~0.15-0.3 us less than a call with
# a keyword argument).
cdef const char *_CALL_CAPSULE = b"kronlinalg.call_replay"


cdef class _PairMemo:
    """The last NumPy pair a front replayed, read straight from the arrays' C fields: a repeat
    of it skips the key (six attribute reads, tuples, a dict lookup that hashes the dtypes:
    ~0.35 us, 5-10 % of a 5 us matmul).  Immutable once made (a front swaps the whole object),
    valid while `entries` is the cache's current dict (a cleared cache makes a new one); the
    dtypes are held, so comparing them by identity is exact."""

    cdef object entries, replayer, algorithm, da, db
    cdef _pair_replay_fn fast  # the replayer's C entry point, or NULL
    cdef int nda, ndb
    cdef Py_ssize_t sa[2 * _MEMO_NDIM]  # dimensions, then strides
    cdef Py_ssize_t sb[2 * _MEMO_NDIM]


cdef inline bint _read_fields(Py_ssize_t *dst, int *nd, object a):
    cdef PyArrayObject *arr = <PyArrayObject *> a
    cdef int n = PyArray_NDIM(arr), i
    if n > _MEMO_NDIM:
        return False
    cdef npy_intp *dims = PyArray_DIMS(arr)
    cdef npy_intp *strides = PyArray_STRIDES(arr)
    for i in range(n):
        dst[i] = dims[i]
        dst[_MEMO_NDIM + i] = strides[i]
    nd[0] = n
    return True


cdef inline bint _same_fields(const Py_ssize_t *ref, int nd, object descr, object a):
    cdef PyArrayObject *arr = <PyArrayObject *> a
    if PyArray_NDIM(arr) != nd or <object> <PyObject *> PyArray_DESCR(arr) is not descr:
        return False
    cdef npy_intp *dims = PyArray_DIMS(arr)
    cdef npy_intp *strides = PyArray_STRIDES(arr)
    cdef int i
    for i in range(nd):
        if dims[i] != ref[i] or strides[i] != ref[_MEMO_NDIM + i]:
            return False
    return True


cdef _PairMemo _pair_memo(entries, replayer, algorithm, a, b):
    """A memo of NumPy arrays a, b (exact ndarrays) replayed by replayer, or None (too many
    dimensions)."""
    cdef _PairMemo m = _PairMemo.__new__(_PairMemo)
    if not _read_fields(m.sa, &m.nda, a) or not _read_fields(m.sb, &m.ndb, b):
        return None
    m.entries, m.replayer, m.algorithm = entries, replayer, algorithm
    m.da = <object> <PyObject *> PyArray_DESCR(<PyArrayObject *> a)
    m.db = <object> <PyObject *> PyArray_DESCR(<PyArrayObject *> b)
    m.fast = NULL
    cap = getattr(replayer, "_kl_pair_replay", None)
    if cap is not None and PyCapsule_IsValid(cap, _PAIR_CAPSULE):
        m.fast = <_pair_replay_fn> PyCapsule_GetPointer(cap, _PAIR_CAPSULE)
    return m


cdef inline object _memo_replay(_PairMemo m, a, b, alpha):
    # alpha: a plain number (the callers check), or None for matmul's pair (whose replayer
    # takes no alpha)
    if m.fast != NULL:
        return m.fast(m.replayer, a, b, 1.0 if alpha is None else <double> alpha)
    return m.replayer(a, b) if alpha is None else m.replayer(a, b, alpha=alpha)


cdef class _CallMemo:
    """The last call a ScaledFront replayed on device arrays (CuPy, torch) or NumPy arrays: its
    side, algorithm, replayer and each array's key parts.  A repeat is checked by comparing
    each array's fields with these, read the way arrays_signature reads them, without building
    the key's tuples, hashing it or looking it up (~0.7 us of a five-array call on a fast host,
    ~1.5 us on an H100's).  Immutable once made (a front swaps the whole object), valid while
    `entries` is the cache's current dict (a cleared cache makes a new one)."""

    cdef readonly object replayer
    cdef object entries, side, algorithm, kind
    cdef _pair_replay_fn fast  # the replayer's C entry point, or NULL
    cdef Py_ssize_t n
    cdef list shapes, layouts, dtypes, devices

    cpdef bint repeats(self, cache, side, algorithm, x, arrays):
        """Whether a call with these options and arrays (x, then the sequence arrays) repeats
        the remembered one and cache was not cleared since (the fronts' one check: scaled_call,
        the device pairs, structured_matmul's chain_call)."""
        return (self.entries is cache.entries and _same_option(side, self.side)
                and _same_option(algorithm, self.algorithm) and _memo_matches(self, x, arrays))


def call_memo(entries, replayer, side, algorithm, tuple sig):
    """A _CallMemo of the call whose arrays' keys are sig (arrays_signature's), replayed by
    replayer from the cache's dict entries under the options side and algorithm."""
    return _call_memo(entries, replayer, side, algorithm, sig)


cdef _CallMemo _call_memo(entries, replayer, side, algorithm, tuple sig):
    """A memo of the call whose arrays' keys are sig (arrays_signature's)."""
    cdef _CallMemo m = _CallMemo.__new__(_CallMemo)
    m.entries, m.replayer, m.side, m.algorithm = entries, replayer, side, algorithm
    m.kind = sig[0][0]
    m.n = len(sig)
    m.shapes = [k[1] for k in sig]
    m.layouts = [k[2] for k in sig]
    m.dtypes = [k[3] for k in sig]
    m.devices = [k[4] if len(k) > 4 else None for k in sig]
    m.fast = NULL
    cap = getattr(replayer, "_kl_call_replay", None)
    if cap is not None and PyCapsule_IsValid(cap, _CALL_CAPSULE):
        m.fast = <_pair_replay_fn> PyCapsule_GetPointer(cap, _CALL_CAPSULE)
    return m


cdef inline bint _same_option(a, b):
    # side and algorithm: the remembered str by identity or value (anything else: a miss, the
    # key path decides, so an option whose == is odd, an array say, is never compared)
    return a is b or type(a) is str and a == b


cdef bint _memo_matches(_CallMemo m, x, factors):
    """Whether x and factors have the keys the memo's call had (what arrays_signature would
    give, compared field by field)."""
    cdef Py_ssize_t i, n = m.n
    if len(factors) != n - 1:
        return False
    t = m.kind
    if t is _torch_tensor:
        if _functorch_level is not None and _functorch_level() is not None:
            return False
        for i in range(n):
            a = x if i == 0 else factors[i - 1]
            if (type(a) is not t or field_read(&_tf.requires_grad, a)
                    or field_read(&_tf.dtype, a) is not m.dtypes[i]):
                return False
            if field_read(&_tf.get_device, a) != m.devices[i]:
                return False
            layout = m.layouts[i]
            if layout is True:
                if not field_read(&_tf.is_contiguous, a):
                    return False
            elif a.stride() != layout:
                return False
            if field_read(&_tf.shape, a) != m.shapes[i]:
                return False
        return True
    for i in range(n):
        a = x if i == 0 else factors[i - 1]
        if type(a) is not t:
            return False
        dt = m.dtypes[i]
        if t is _ndarray:
            adt = a.dtype
            if adt is not dt and adt != dt:
                return False
            if a.shape != m.shapes[i] or a.strides != m.layouts[i]:
                return False
            continue
        adt = field_read(&_cf.dtype, a)
        if adt is not dt and adt != dt:
            return False
        if (field_read(&_cf.shape, a) != m.shapes[i]
                or field_read(&_cf.strides, a) != m.layouts[i]):
            return False
        if _cupy_device(a) != m.devices[i]:
            return False
    return True


cdef class ScaledFront:
    """The compiled first step of a public ``op(x, factors, *, side, alpha, beta, y, algorithm)``
    call (see scaled_call): the operation whose full path runs on a miss, its per-signature
    cache, and which arrays its keys take (host: NumPy; torch_cpu: CPU torch tensors).  A
    two-array front (pair_call, stack_call) also keeps the last NumPy pair it replayed."""

    cdef readonly object operation
    cdef readonly object cache
    cdef readonly bint host, torch_cpu
    cdef _PairMemo memo
    cdef _CallMemo call_memo

    def __init__(self, operation, cache, bint host, bint torch_cpu):
        self.operation = operation
        self.cache = cache
        self.host = host
        self.torch_cpu = torch_cpu
        self.memo = None
        self.call_memo = None

    cdef _PairMemo memo_hit(self, a, b, algorithm):
        """The memo of the last NumPy pair when a, b repeat it (same dimensions, strides
        and dtype objects) under the same algorithm and the cache was not cleared since;
        else None."""
        cdef _PairMemo m = self.memo
        if (m is None or type(a) is not _ndarray or type(b) is not _ndarray
                or m.algorithm is not algorithm and m.algorithm != algorithm
                or m.entries is not self.cache.entries):
            return None
        if _same_fields(m.sa, m.nda, m.da, a) and _same_fields(m.sb, m.ndb, m.db, b):
            return m
        return None

    cdef void remember_pair(self, a, b, algorithm, replayer, entries):
        if self.host and type(a) is _ndarray and type(b) is _ndarray:
            self.memo = _pair_memo(entries, replayer, algorithm, a, b)


cpdef remembered(cache, key):
    """The replayer a SignatureCache holds for key, or None (also for an unhashable key: an
    option such as side=["right"], which the full path then explains)."""
    try:
        return cache.entries.get(key)
    except TypeError:
        return None


def scaled_call(ScaledFront front, x, factors, side, alpha, beta, y, algorithm):
    """``front.operation(x, factors, side=…, alpha=…, beta=…, y=…, algorithm=…)``, replayed
    without a Python frame of the skeleton when the call is the common repeated one: factors a
    list or tuple, y None, beta an exact 0 and alpha a plain number (Python float or int).  The
    key is the one the operation's own signature gives — (side, algorithm, arrays' keys) — so
    the entries its full path remembers are the ones found here; anything else (NumPy scalars,
    a stale replay that answers None) takes the full path, which decides and says what is wrong."""
    cdef object tf = type(factors), ta = type(alpha), tb = type(beta)
    cdef list arrays
    cdef _CallMemo m
    if (y is None and (tb is float or tb is int) and beta == 0
            and (ta is float or ta is int and -_EXACT <= alpha <= _EXACT)
            and (tf is list or tf is tuple)):
        m = front.call_memo
        if m is not None and m.repeats(front.cache, side, algorithm, x, factors):
            if m.fast != NULL:
                out = m.fast(m.replayer, x, factors, alpha)
            else:
                out = m.replayer(x, factors, alpha=alpha)
            if out is not None:
                return out
            front.call_memo = None  # (stale: the full path remembers anew)
        arrays = [x]
        arrays.extend(factors)
        sig = arrays_signature(arrays, front.host, front.torch_cpu)
        if sig is not None:
            entries = front.cache.entries
            replayer = remembered(front.cache, (side, algorithm, sig))
            if replayer is not None:
                # (a remembered key fixed side, and beta == 0 with y None: replays read alpha)
                out = replayer(x, factors, alpha=alpha)
                if out is not None:
                    front.call_memo = _call_memo(entries, replayer, side, algorithm, sig)
                    return out
    return front.operation(x, factors, side=side, alpha=alpha, beta=beta, y=y,
                           algorithm=algorithm)


def pair_call(ScaledFront front, a, b):
    """``front.operation(a, b)`` (no options: algorithm "auto"), replayed without a Python frame
    of the skeleton when (the operation's own key) ("auto", keys of a and b) was remembered —
    matmul's call: a tiny product costs about as much as the skeleton's frames."""
    cdef _PairMemo m = front.memo_hit(a, b, "auto")
    if m is not None:
        out = _memo_replay(m, a, b, None)
        if out is not None:
            return out
    elif _device_memo_hit(front, a, b, "auto"):
        out = front.call_memo.replayer(a, b)
        if out is not None:
            return out
        front.call_memo = None  # (stale: the key path below decides)
    sig = arrays_signature((a, b), front.host, front.torch_cpu)
    if sig is not None:
        entries = front.cache.entries
        replayer = remembered(front.cache, ("auto",) + sig)
        if replayer is not None:
            out = replayer(a, b)
            if out is not None:
                front.remember_pair(a, b, "auto", replayer, entries)
                _remember_device_pair(front, a, replayer, "auto", sig, entries)
                return out
    return front.operation(a, b)


def operand_call(ScaledFront front, A, B, alpha, beta, c, algorithm):
    """``front.operation(A, B, alpha=…, beta=…, c=…, algorithm=…)`` for an operand type A (a
    block-sparse matrix: its ``_serial`` names it, never reused) and one array B -- spmm's
    call -- replayed without a Python frame of the skeleton when the call is the common
    repeated one: c None, beta an exact 0, alpha a plain number, and (A's serial, B's key,
    algorithm), the operation's own key, remembered.  A repeat of the last replayed call is
    checked field by field (no key built or looked up)."""
    cdef object ta = type(alpha), tb = type(beta)
    cdef _CallMemo m
    if (c is None and (tb is float or tb is int) and beta == 0
            and (ta is float or ta is int and -_EXACT <= alpha <= _EXACT)):
        serial = getattr(A, "_serial", None)
        if type(serial) is int:
            m = front.call_memo
            if (m is not None and m.entries is front.cache.entries and m.side == serial
                    and _same_option(algorithm, m.algorithm) and _memo_matches(m, B, ())):
                out = m.replayer(A, B, alpha=alpha)
                if out is not None:
                    return out
                front.call_memo = None  # (stale: the key path below decides)
            sig = arrays_signature((B,), front.host, front.torch_cpu)
            if sig is not None:
                entries = front.cache.entries
                replayer = remembered(front.cache, (serial, sig[0], algorithm))
                if replayer is not None:
                    out = replayer(A, B, alpha=alpha)
                    if out is not None:
                        front.call_memo = _call_memo(entries, replayer, serial, algorithm, sig)
                        return out
    return front.operation(A, B, alpha=alpha, beta=beta, c=c, algorithm=algorithm)


cdef inline bint _device_memo_hit(ScaledFront front, a, b, algorithm):
    """Whether a, b (not NumPy arrays) repeat the last device pair the front replayed, field
    by field (no key tuples built or hashed: ~1 us of a torch call on an H100's host)."""
    cdef _CallMemo cm = front.call_memo
    # (side: None, as _remember_device_pair made it)
    return (cm is not None and type(a) is not _ndarray
            and cm.repeats(front.cache, None, algorithm, a, (b,)))


cdef inline void _remember_device_pair(ScaledFront front, a, replayer, algorithm, tuple sig,
                                       entries):
    if type(a) is not _ndarray:
        front.call_memo = _call_memo(entries, replayer, None, algorithm, sig)


def stack_call(ScaledFront front, a, b, c, alpha, beta, sizes, out_size, algorithm):
    """``front.operation(a, b, c=…, alpha=…, beta=…, sizes=…, out_size=…, algorithm=…)``
    replayed without a Python frame of the skeleton for the common repeated call — two stacks,
    no c, sizes or out_size, beta an exact 0, alpha a plain number — whose key (the operation's
    own: (algorithm, keys of a and b)) was remembered: batched_matmul's call."""
    cdef object ta = type(alpha), tb = type(beta)
    cdef _PairMemo m
    if (c is None and sizes is None and out_size is None and (tb is float or tb is int)
            and beta == 0 and (ta is float or ta is int and -_EXACT <= alpha <= _EXACT)):
        m = front.memo_hit(a, b, algorithm)
        if m is not None:
            out = _memo_replay(m, a, b, alpha)
            if out is not None:
                return out
        elif _device_memo_hit(front, a, b, algorithm):
            out = front.call_memo.replayer(a, b, alpha=alpha)
            if out is not None:
                return out
            front.call_memo = None  # (stale: the key path below decides)
        sig = arrays_signature((a, b), front.host, front.torch_cpu)
        if sig is not None:
            entries = front.cache.entries
            replayer = remembered(front.cache, (algorithm,) + sig)
            if replayer is not None:
                out = replayer(a, b, alpha=alpha)
                if out is not None:
                    front.remember_pair(a, b, algorithm, replayer, entries)
                    _remember_device_pair(front, a, replayer, algorithm, sig, entries)
                    return out
    return front.operation(a, b, c=c, alpha=alpha, beta=beta, sizes=sizes, out_size=out_size,
                           algorithm=algorithm)
