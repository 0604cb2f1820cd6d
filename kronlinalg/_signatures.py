"""Per-signature caches for the operations' per-call fast paths.

Tiny products are host-bound: validating a call and asking the planner costs more than the
kernel.  A call whose signature (library, shapes, strides, dtypes, devices and the options
that matter) was validated, planned and launched before can go straight to the launch with
what the first call found.  Planner changes (calibration, new coefficients) clear every cache.
"""

from __future__ import annotations

from . import _backend
from .planner import _plan


class SignatureCache(dict):
    """signature -> what the full path found for it; bounded, cleared with the planner."""

    def __init__(self, limit: int = 4096):
        super().__init__()
        self.limit = limit
        _plan.clear_hooks.append(self.clear)

    def remember(self, key, entry) -> None:
        if len(self) >= self.limit:
            self.clear()
        self[key] = entry


def arrays_signature(arrays, host: bool):
    """Tuple of the arrays' keys, all CUDA arrays (_backend.cuda_array_key) or, with host=True,
    all NumPy arrays (_backend.host_array_key); None for any other mix (the full path)."""
    it = iter(arrays)
    first = next(it, None)
    if first is None:
        return None
    array_key = _backend.cuda_array_key
    k = array_key(first)
    if k is None:
        if not host:
            return None
        array_key = _backend.host_array_key
        k = array_key(first)
        if k is None:
            return None
    keys = [k]
    for a in it:
        k = array_key(a)
        if k is None:
            return None
        keys.append(k)
    return tuple(keys)
