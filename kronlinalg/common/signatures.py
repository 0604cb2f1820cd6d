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
    free-threaded build alike)."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self._entries: dict = {}
        self._lock = threading.Lock()
        on_change(self.clear)

    def get(self, key):
        try:
            return self._entries.get(key)
        except TypeError:  # an unhashable argument (side=["right"]): the full path says what
            return None

    def remember(self, key, entry) -> None:
        try:
            hash(key)
        except TypeError:
            return
        with self._lock:
            if len(self._entries) >= self.limit:
                self._entries = {}
            self._entries[key] = entry

    def clear(self) -> None:
        with self._lock:
            self._entries = {}

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> tuple:
        return tuple(self._entries)


def arrays_signature_python(arrays, host: bool):
    """Tuple of the arrays' keys — (type, shape, strides, dtype, device) for CuPy arrays and CUDA
    torch tensors that need no autograd, (type, shape, strides, dtype) with host=True for NumPy
    arrays — all of one library; None for anything else (the full path).

    The hot path of every repeated call: the library is resolved once, from the first array,
    and each array costs its four attribute reads (a tiny product is host-bound)."""
    if not arrays:
        return None
    t = type(arrays[0])
    if t is np.ndarray:
        if not host:
            return None
        keys = []
        for a in arrays:
            if type(a) is not t:
                return None
            keys.append((t, a.shape, a.strides, a.dtype))
        return tuple(keys)
    modules = sys.modules
    cupy = modules.get("cupy")
    if cupy is not None and t is cupy.ndarray:
        keys = []
        for a in arrays:
            if type(a) is not t:
                return None
            keys.append((t, a.shape, a.strides, a.dtype, a.data.device_id))
        return tuple(keys)
    torch = modules.get("torch")
    if torch is not None and t is torch.Tensor:
        keys = []
        for a in arrays:
            if type(a) is not t or not a.is_cuda or a.requires_grad:
                return None
            keys.append((t, a.shape, a.stride(), a.dtype, a.get_device()))
        return tuple(keys)
    return None


# the compiled twin (kronlinalg/_ext/_signatures.pyx) where the build has it: the same keys for
# about half the host time (tests/test_signatures.py compares the two)
_compiled = load("signatures")
arrays_signature = _compiled.arrays_signature if _compiled is not None else arrays_signature_python
