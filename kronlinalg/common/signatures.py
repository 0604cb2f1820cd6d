"""Per-signature caches for the operations' per-call fast paths.

Tiny products are host-bound: validating a call and asking the planner costs more than the
kernel.  A call whose signature (library, shapes, strides, dtypes, devices and the options
that matter) was validated, planned and launched before can go straight to the launch with
what the first call found.  Planner changes (calibration, new coefficients) clear every cache.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from .._ext import load
from . import backend

_listeners: list = []  # run by changed(): the planner's plan cache and every SignatureCache
_lock = threading.Lock()


def on_change(fn) -> None:
    """Run fn() whenever what a cached choice depends on changes (changed())."""
    with _lock:
        _listeners.append(fn)


def changed() -> None:
    """Drop every cached choice: the planner's plans and the operations' fast paths (a new
    calibration, new coefficients, another float32 mode, a measured plan)."""
    with _lock:
        listeners = list(_listeners)
    for fn in listeners:
        fn()


class SignatureCache:
    """signature -> what the full path found for it; bounded, cleared by changed().

    Safe under threads without relying on the GIL: writers and the eviction hold a lock; a
    reader sees an entry or None (a dict read of one key is atomic in CPython and the
    free-threaded build alike).  ``entries`` is the current dict (replaced, never mutated in
    place by clear): the compiled fronts (ScaledFront) read it directly."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self.entries: dict = {}
        self._lock = threading.Lock()
        on_change(self.clear)

    def get(self, key):
        try:
            return self.entries.get(key)
        except TypeError:  # an unhashable argument (side=["right"]): the full path says what
            return None

    def remember(self, key, entry) -> None:
        try:
            hash(key)
        except TypeError:
            return
        with self._lock:
            if len(self.entries) >= self.limit:
                self.entries = {}
            self.entries[key] = entry

    def clear(self) -> None:
        with self._lock:
            self.entries = {}

    def __len__(self) -> int:
        return len(self.entries)

    def keys(self) -> tuple:
        return tuple(self.entries)


# arrays_signature(arrays, host) -> the arrays' keys, or None (the full path): the hot path of
# every repeated call, compiled (kronlinalg/_ext/_signatures.pyx says what the keys are).
_compiled = load("signatures")
arrays_signature = _compiled.arrays_signature

# ScaledFront(operation, cache, host, torch_cpu) and scaled_call(front, x, factors, side, alpha,
# beta, y, algorithm): an operation's public call with the fast path compiled (kron_matmul's).
ScaledFront = _compiled.ScaledFront
scaled_call = _compiled.scaled_call
# pair_call(front, a, b): op(a, b) with no options, through the same front (matmul's)
pair_call = _compiled.pair_call
# stack_call(front, a, b, c, alpha, beta, sizes, out_size, algorithm): batched_matmul's call
stack_call = _compiled.stack_call
# operand_call(front, A, B, alpha, beta, c, algorithm): an operand type and one array (spmm's)
operand_call = _compiled.operand_call


def plain_repeat(alpha, beta, c, rest) -> bool:
    """Whether a replayer's call is the plain repeat a stack replay covers: no c, beta an exact
    0, alpha a Python number, no other option set (anything else takes the full path)."""
    return (c is None and beta == 0 and type(alpha) in (float, int)
            and all(v is None for v in rest.values()))


# the compiled replay of a CPU stack product (batched_matmul's kernel; matmul's too)
_batched_cpu = load("batched_cpu")


def host_stack_replayer(a, b, out):
    """A replayer of the CPU stack product a @ b whose result was out (the compiled
    StackReplay: a repeat fills in three addresses): NumPy arrays directly; CPU torch tensors
    by their data_ptr(), the result returned as a tensor (their full path costs a tiny stack
    ~30 µs of host time, this ~2.5); None where neither applies (no kernel build, another byte
    order, a layout the full path copies, a lazy negated view, bfloat16)."""
    if _batched_cpu is None:
        return None
    if type(a) is np.ndarray and type(b) is np.ndarray:
        if not (backend.host_ready(a) and backend.host_ready(b)):
            return None
        return _batched_cpu.stack_replayer(a, b, out)
    if not (backend.is_torch(a) and backend.is_torch(b) and backend.is_torch(out)):
        return None
    try:
        an, bn, on = a.numpy(), b.numpy(), out.numpy()
    except (RuntimeError, TypeError):  # lazy negated/conjugated views; bfloat16 (no NumPy type)
        return None
    if not (backend.host_ready(an) and backend.host_ready(bn)):
        return None
    replay = _batched_cpu.stack_replayer(an, bn, on)
    if replay is None:
        return None
    from_numpy = sys.modules["torch"].from_numpy  # (loaded: a is a tensor)
    run, item = replay.run_addresses, an.itemsize

    def replayer(a, b, /, *, alpha=1.0, beta=0.0, c=None, **rest):
        # (the signature holds type, shape, strides and dtype; not a lazy negation, which
        # data_ptr() does not apply, nor the address's alignment)
        if not plain_repeat(alpha, beta, c, rest) or a.is_neg() or b.is_neg():
            return None
        pa, pb = a.data_ptr(), b.data_ptr()
        if pa % item or pb % item:
            return None
        return from_numpy(run(pa, pb, float(alpha)))

    return replayer
