"""Argument checks shared by the operations: every error names the argument at fault."""

from __future__ import annotations

import operator
import sys

import array_api_compat
import numpy as np

from . import backend as _backend

from .dtypes import FLOAT as FLOAT_DTYPES


# Array types whose namespace depends on the type alone (the per-call hot path looks it up here).
_NAMESPACE_BY_TYPE: dict = {}


def _cacheable(t) -> bool:
    mod = sys.modules.get(t.__module__.split(".", 1)[0])
    return t is np.ndarray or (mod is not None and mod.__name__ in ("cupy", "torch"))


def namespace_of(named: dict):
    """The one array namespace of all named arrays; TypeError naming the odd one out."""
    first_name, first = next(iter(named.items()))
    kinds = {type(a) for a in named.values()}
    if len(kinds) == 1:
        # one array type: one namespace (the common case, and the per-call hot path)
        t = kinds.pop()
        xp = _NAMESPACE_BY_TYPE.get(t)
        if xp is not None:
            return xp
        try:
            xp = array_api_compat.array_namespace(first)
        except TypeError:
            raise TypeError(f"{first_name}: expected an array, got {type(first).__name__}") from None
        if _cacheable(t):
            _NAMESPACE_BY_TYPE[t] = xp
        return xp
    try:
        xp = array_api_compat.array_namespace(first)
    except TypeError:
        raise TypeError(f"{first_name}: expected an array, got {type(first).__name__}") from None
    for name, a in named.items():
        try:
            other = array_api_compat.array_namespace(a)
        except TypeError:
            raise TypeError(f"{name}: expected an array, got {type(a).__name__}") from None
        if other is not xp:
            raise TypeError(
                f"{name}: array from {other.__name__}, but {first_name} is from {xp.__name__}; "
                "all arrays must come from one library"
            )
    return xp


def same_device(named: dict) -> None:
    """ValueError naming the first array that is not on the first array's device."""
    first_name, first = next(iter(named.items()))
    if all(type(a) is np.ndarray for a in named.values()):
        return  # host memory, one device
    dev = _device_key(first)
    for name, a in named.items():
        if _device_key(a) != dev:
            dev = array_api_compat.device(first)
            raise ValueError(
                f"{name}: on device {array_api_compat.device(a)}, but {first_name} is on {dev}"
            )


def _device_key(a):
    """What identifies a's device, cheaply for CuPy (array_api_compat.device builds a Device)."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and type(a) is cupy.ndarray:
        return ("cupy", a.data.device_id)
    return array_api_compat.device(a)


def float_dtype(name: str, a) -> str:
    """The dtype name of a, which must be real floating point."""
    dt = _backend.dtype_name(a.dtype)
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected a real floating-point array, got dtype {dt}")
    return dt


def scalar(name: str, value) -> float:
    if isinstance(value, (str, bytes)):  # float() would parse them
        raise TypeError(f"{name}: expected a real scalar, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a real scalar, got {value!r}") from None


def count(name: str, value) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {value!r}") from None
