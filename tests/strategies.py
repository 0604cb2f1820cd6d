"""Reusable generators for property tests: memory layouts, dtypes, shapes and scalars.

Every operation's tests draw their inputs from here, so a new operation gets the same coverage
of layouts (C and Fortran order, gaps, negative strides, byte strides that are not a multiple
of the itemsize) and dtypes for free.  Plain helpers (:func:`layout_view`) build arrays of one
backend in one layout from NumPy values; the hypothesis strategies (``st_*``) draw the
choices.  Hypothesis is imported lazily: the plain helpers work without it.

    >>> import numpy as np
    >>> from _helpers import make_backend
    >>> v = layout_view(make_backend("numpy"), np.arange(6.0).reshape(2, 3), "bytes")
    >>> v.strides, v.tolist()
    ((36, 12), [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
"""

from __future__ import annotations

import numpy as np

from _helpers import Backend, to_xp

__all__ = ["LAYOUTS", "layout_view", "layouts_for", "st_layout", "st_dtype", "st_dims",
           "st_batch", "st_kron_factors", "st_ks_chain", "st_scalar", "st_seed", "random_values",
           "exact_values"]

#: every memory layout layout_view() can build
#: c: C-contiguous; f: Fortran order; gaps: every other element of a larger buffer (positive
#: strides, not contiguous); reversed: every axis stepped backwards (negative strides); bytes:
#: a field of a structured array (byte strides not a multiple of the itemsize, unaligned);
#: bytes_reversed: the same read backwards
LAYOUTS = ("c", "f", "gaps", "reversed", "bytes", "bytes_reversed")


def layouts_for(xp: Backend, dtype: str = "float64") -> tuple:
    """The layouts backend xp can hold arrays of dtype in (torch has element strides and no
    negative ones; bfloat16 exists only in torch)."""
    if dtype == "bfloat16" or xp.is_torch:
        return ("c", "f", "gaps")
    if xp.name == "cupy":  # byte-strided CuPy arrays are refused (test_hardening checks how)
        return ("c", "f", "gaps", "reversed")
    return LAYOUTS  # numpy and array-api-strict (which wraps NumPy arrays as they are)


def _numpy_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """A NumPy array equal to a (same dtype) in `layout`."""
    if layout == "c":
        return np.ascontiguousarray(a)
    if layout == "f":
        return np.asfortranarray(a)
    if layout == "gaps":
        big = np.zeros(tuple(2 * n + 1 for n in a.shape), dtype=a.dtype)
        view = big[tuple(slice(1, 2 * n + 1, 2) for n in a.shape)]
        view[...] = a
        return view
    if layout == "reversed":
        rev = tuple(slice(None, None, -1) for _ in a.shape)
        return np.ascontiguousarray(a[rev])[rev]
    if layout in ("bytes", "bytes_reversed"):
        # a 4-byte field after the value: records of itemsize + 4 bytes, values unaligned for
        # itemsizes of 8
        rec = np.zeros(a.size, dtype=[("pad", np.uint8, (4,)), ("v", a.dtype)])
        field = rec["v"]
        if layout == "bytes":
            field[...] = a.ravel()
            return field.reshape(a.shape)
        field[...] = a.ravel()[::-1]
        return field[::-1].reshape(a.shape)  # a uniformly strided 1-D array: a view
    raise ValueError(layout)


def layout_view(xp: Backend, a, layout: str = "c", dtype: str | None = None, *,
                refused: bool = False):
    """`a` (NumPy values) as an array of backend xp in dtype (default a's), laid out as
    `layout` (one of LAYOUTS); None where xp cannot hold that layout (see layouts_for).
    refused=True also builds the CuPy byte-strided layouts that kronlinalg refuses (to test
    the refusal)."""
    a = np.asarray(a)
    dtype = dtype or a.dtype.name
    cupy_bytes = refused and xp.name == "cupy" and layout.startswith("bytes")
    if layout not in layouts_for(xp, dtype) and not cupy_bytes:
        return None
    if layout == "c":
        return to_xp(xp, a, dtype)
    if xp.is_torch:
        t = to_xp(xp, a, dtype)
        if layout == "f":
            return t.mT.contiguous().mT if t.ndim >= 2 else t
        big = xp.module.zeros(tuple(2 * n + 1 for n in t.shape), dtype=t.dtype, device=t.device)
        view = big[tuple(slice(1, 2 * n + 1, 2) for n in t.shape)]
        view[...] = t
        return view
    host = _numpy_layout(a.astype(dtype), layout)
    if xp.name == "numpy":
        return host
    if xp.name == "array_api_strict":
        return xp.module.asarray(host)  # wraps the NumPy array, strides and all
    if xp.name == "cupy":
        cupy = xp.module
        if layout in ("c", "f"):
            return cupy.asarray(host, order="K")
        # the same byte layout on the device: copy the whole underlying buffer, view it the same way
        base = host
        while isinstance(base.base, np.ndarray):
            base = base.base
        raw = np.frombuffer(base.tobytes(), dtype=np.uint8)
        dev = cupy.asarray(raw)
        offset = host.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        mem = dev.data + offset
        return cupy.ndarray(host.shape, dtype=host.dtype, memptr=mem, strides=host.strides)
    raise ValueError(xp.name)


def random_values(rng: np.random.Generator, shape, dtype: str = "float64") -> np.ndarray:
    """Standard-normal values bounded away from zero, rounded to dtype, as float64 NumPy
    (bfloat16 rounded through float32's top half)."""
    a = rng.standard_normal(shape)
    a = np.where(np.abs(a) < 0.05, 0.5, a)
    if dtype == "bfloat16":
        bits = a.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
        return bits.view(np.float32).astype(np.float64)
    return a.astype(dtype).astype(np.float64)


def exact_values(xp: Backend, arr, host: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values an array made by layout_view(xp, host, ..., dtype) holds (the
    reference must see the inputs' rounding, not the unrounded host values)."""
    if dtype == "bfloat16":
        from _helpers import to_numpy

        return to_numpy(arr).astype(np.float64)
    return np.asarray(host).astype(dtype).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# hypothesis strategies (imported lazily: the helpers above need no hypothesis)


def _st():
    from hypothesis import strategies

    return strategies


def st_seed():
    """A seed for np.random.default_rng: hypothesis shrinks the shape, the values stay random."""
    return _st().integers(0, 2**32 - 1)


def st_dtype(xp: Backend):
    """Every float dtype xp computes in."""
    return _st().sampled_from(xp.dtypes)


def st_layout(xp: Backend, dtype: str = "float64"):
    return _st().sampled_from(layouts_for(xp, dtype))


def st_dims(min_value: int = 1, max_value: int = 4):
    """One dimension's size."""
    return _st().integers(min_value, max_value)


def st_batch(max_dims: int = 2, max_side: int = 3, allow_empty: bool = False):
    """Leading batch dimensions (a tuple, possibly ()); allow_empty adds 0-length ones."""
    st = _st()
    return st.lists(st.integers(0 if allow_empty else 1, max_side), max_size=max_dims).map(tuple)


def st_kron_factors(max_factors: int = 3, max_side: int = 4, square: bool = False):
    """Kronecker factor shapes [(P1, Q1), ...]: rectangular unless square."""
    st = _st()
    side = st.integers(1, max_side)
    shape = side.map(lambda n: (n, n)) if square else st.tuples(side, side)
    return st.lists(shape, min_size=1, max_size=max_factors)


def st_scalar(zero: bool = True):
    """alpha / beta: the special values BLAS treats apart (0, 1, -1) and arbitrary ones."""
    st = _st()
    special = [1.0, -1.0, 0.5] + ([0.0] if zero else [])
    # magnitudes from 1/8 to 4: no subnormal products, so per-dtype tolerances hold
    return st.one_of(st.sampled_from(special), st.floats(0.125, 4.0), st.floats(-4.0, -0.125))


def _divisors(n: int) -> list:
    return [k for k in range(1, n + 1) if n % k == 0]


def st_ks_chain(max_factors: int = 3, max_side: int = 3):
    """Patterns [(a, b, c, d), ...] of Kronecker-sparse factors whose product is defined (the
    columns a·c·d of each equal the rows a·b·d of the next)."""
    st = _st()

    @st.composite
    def chain(draw):
        side = st.integers(1, max_side)
        pats = [(draw(side), draw(side), draw(side), draw(side))]
        for _ in range(draw(st.integers(0, max_factors - 1))):
            a, _, c, d = pats[-1]
            n = a * c * d
            a2 = draw(st.sampled_from(_divisors(n)))
            d2 = draw(st.sampled_from(_divisors(n // a2)))
            pats.append((a2, n // (a2 * d2), draw(side), d2))
        return pats

    return chain()
