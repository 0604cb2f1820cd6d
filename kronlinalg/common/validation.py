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
    """ValueError naming the first array that is not on the first array's device, or that has
    no data (a torch meta tensor)."""
    first_name, first = next(iter(named.items()))
    if all(type(a) is np.ndarray for a in named.values()):
        return  # host memory, one device
    for name, a in named.items():
        if getattr(a, "is_meta", False) is True:
            raise ValueError(f"{name}: a torch 'meta' tensor has shape and dtype but no data to "
                             "compute on; pass a CPU or CUDA tensor (plan() takes shapes alone)")
    dev = _device_key(first)
    for name, a in named.items():
        if _device_key(a) != dev:
            dev = array_api_compat.device(first)
            raise ValueError(
                f"{name}: on device {array_api_compat.device(a)}, but {first_name} is on {dev}"
            )


def floating_arrays(named: dict):
    """The checks every operation makes of its input arrays, at once: one library (its
    namespace), one device, real floating dtypes; returns (namespace, promoted dtype name)."""
    xp = namespace_of(named)
    same_device(named)
    for name, a in named.items():
        float_dtype(name, a)
    return xp, _backend.dtype_name(xp.result_type(*named.values()))


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
    if _backend.is_cupy(a) and not _backend.strides_ok(a):
        # (a field of a structured array: CuPy's own kernels, its copies included, fault on it)
        raise ValueError(f"{name}: a CuPy array whose address or byte strides "
                         f"{tuple(a.strides)} are not multiples of its itemsize {a.itemsize} "
                         "cannot be read on the GPU; copy the field on the host first")
    return dt


def scalar(name: str, value) -> float:
    """A real scalar argument (alpha, beta) as a Python float: a Python number or a 0-d array
    (of any library, on the host: a device scalar would need a synchronisation).  TypeError
    naming the argument for strings, complex numbers, arrays with dimensions and other types;
    ValueError for a value beyond float64's range."""
    if type(value) is float:  # the hot path
        return value
    if isinstance(value, (str, bytes)):  # float() would parse them
        raise TypeError(f"{name}: expected a real scalar, got {value!r}")
    shape = getattr(value, "shape", None)
    if shape is not None and tuple(shape) != ():
        raise TypeError(f"{name}: expected a Python scalar or a 0-d array, got an array of shape "
                        f"{tuple(shape)}")
    if isinstance(value, complex) or "complex" in str(getattr(value, "dtype", "")):
        raise TypeError(f"{name}: expected a real scalar, got the complex {value!r}")
    try:
        out = float(value)
    except OverflowError:
        text = repr(value)
        text = text if len(text) <= 24 else f"{text[:10]}…{text[-6:]} ({len(text)} digits)"
        raise ValueError(f"{name}: {text} is beyond the range of float64") from None
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name}: expected a real scalar, got {value!r}") from None
    return out


def count(name: str, value) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {value!r}") from None


def plain_scalar(value):
    """value as a float where it is a Python float, or a Python int within float64's range: what
    a per-call fast path may use without validation; None for anything else (arrays, huge
    ints, strings...), which must take the full path, where scalar() says what is wrong.
    Never raises (a fast path must not fail where the full path would explain)."""
    t = type(value)
    if t is float:
        return value
    if t is int and -(1 << 1023) < value < (1 << 1023):
        return float(value)
    return None


def pattern(name: str, pattern) -> tuple:
    """(a, b, c, d) as four positive Python ints; ValueError/TypeError naming `name`."""
    if isinstance(pattern, (str, bytes)) or not hasattr(pattern, "__len__") or len(pattern) != 4:
        raise ValueError(f"{name}: expected a pattern (a, b, c, d) of four positive integers, "
                         f"got {pattern!r}")
    out = []
    for v in pattern:
        try:
            v = operator.index(v)
        except TypeError:
            raise TypeError(f"{name}: pattern entries must be integers, got {pattern!r}") from None
        if v < 1:
            raise ValueError(f"{name}: pattern entries must be positive, got {tuple(pattern)}")
        out.append(v)
    return tuple(out)
