"""Property tests: kron_matmul and structured_matmul against float64 dense references on
random shapes, rectangular factors, batch dimensions, 1-D x, every float dtype, every memory
layout of tests/strategies.py (C and Fortran order, gaps, negative strides, byte strides that
are not itemsize multiples), y aliasing x, and alpha/beta.

Budget: the default hypothesis profile (conftest.py: 40 examples a test) keeps this file to
seconds on two cores; ``HYPOTHESIS_PROFILE=slow`` runs 2000 examples a test for deeper local
runs.  A failure prints the hypothesis reproduction blob.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

import kronlinalg  # noqa: E402
from kronlinalg import kron_matmul, structured_matmul  # noqa: E402
from kronlinalg.structured import KSFactor  # noqa: E402

from _helpers import RTOL, assert_close, kron_matmul_ref, to_numpy  # noqa: E402
from strategies import (exact_values, layout_view, st_batch, st_dtype, st_kron_factors,  # noqa: E402
                        st_ks_chain, st_layout, st_scalar, st_seed)


def _make(xp, data, rng, shape, dtype):
    """(array of a drawn layout, its exact float64 values)."""
    host = rng.standard_normal(shape)
    host = np.where(np.abs(host) < 0.05, 0.5, host)
    layout = data.draw(st_layout(xp, dtype), label="layout")
    arr = layout_view(xp, host, layout, dtype)
    return arr, exact_values(xp, arr, host, dtype)


def _snapshot(a):
    return np.array(to_numpy(a), dtype=np.float64, copy=True) if a is not None else None


def _rtol(dtype, depth):
    # each factor (or Kronecker-sparse product) rounds once more in low precision
    return RTOL[dtype] * (1 + depth) if dtype in ("float16", "bfloat16") else RTOL[dtype] * 10


@given(data=st.data())
def test_kron_matmul_matches_dense_reference(xp, data):
    dtype = data.draw(st_dtype(xp), label="dtype")
    side = data.draw(st.sampled_from(["right", "left"]), label="side")
    square = data.draw(st.booleans(), label="square")  # square factors let y alias x
    fshapes = data.draw(st_kron_factors(max_factors=3, max_side=4, square=square), label="factors")
    batch = data.draw(st_batch(max_dims=2, max_side=3, allow_empty=True), label="batch")
    P, Q = math.prod(p for p, _ in fshapes), math.prod(q for _, q in fshapes)
    if side == "right":
        xshape = batch + (P,)
    elif data.draw(st.booleans(), label="vector") and not batch:
        xshape = (Q,)
    else:
        xshape = batch + (Q, data.draw(st.integers(1, 3), label="columns"))
    rng = np.random.default_rng(data.draw(st_seed(), label="seed"))
    x, x64 = _make(xp, data, rng, xshape, dtype)
    made = [_make(xp, data, rng, s, dtype) for s in fshapes]
    fs, f64 = [a for a, _ in made], [v for _, v in made]
    alpha = data.draw(st_scalar(), label="alpha")
    beta = data.draw(st_scalar(), label="beta")
    out_shape = (xshape[:-1] + (Q,) if side == "right" else
                 (P,) if len(xshape) == 1 else xshape[:-2] + (P, xshape[-1]))
    y = y64 = None
    if beta != 0.0:
        if square and data.draw(st.booleans(), label="y is x"):
            y, y64 = x, x64
        else:
            y, y64 = _make(xp, data, rng, out_shape, dtype)
    algorithm = data.draw(st.sampled_from(["auto", "sliced", "shuffle"]), label="algorithm")
    before = [_snapshot(a) for a in (x, *fs, y)]
    out = kron_matmul(x, fs, side=side, alpha=alpha, beta=beta, y=y, algorithm=algorithm)
    ref = kron_matmul_ref(x64, f64, side=side, alpha=alpha, beta=beta, y=y64)
    assert_close(out, ref, xp, dtype, _rtol(dtype, len(fs)))
    for a, b in zip((x, *fs, y), before):  # inputs are never modified
        if a is not None:
            np.testing.assert_array_equal(_snapshot(a), b)


def _ks_dense(pattern, values):
    return KSFactor(pattern, values).to_dense()


@given(data=st.data())
def test_structured_matmul_matches_dense_reference(xp, data):
    dtype = data.draw(st_dtype(xp), label="dtype")
    patterns = data.draw(st_ks_chain(max_factors=3, max_side=3), label="patterns")
    layout = data.draw(st.sampled_from(["batch_first", "batch_last"]), label="layout")
    N = patterns[-1][0] * patterns[-1][2] * patterns[-1][3]
    if layout == "batch_first":
        batch = data.draw(st_batch(max_dims=2, max_side=4, allow_empty=True), label="batch")
        xshape = batch + (N,)
    else:
        cols = data.draw(st.one_of(st.none(), st.integers(0, 5)), label="columns")
        xshape = (N,) if cols is None else (N, cols)
    rng = np.random.default_rng(data.draw(st_seed(), label="seed"))
    x, x64 = _make(xp, data, rng, xshape, dtype)
    made = [_make(xp, data, rng, p, dtype) for p in patterns]
    chain = [KSFactor(p, v) for p, (v, _) in zip(patterns, made)]
    dense = np.eye(chain[0].shape[0])
    for p, (_, v64) in zip(patterns, made):
        dense = dense @ _ks_dense(p, v64)
    algorithms = ["auto", "kernel", "bmm", "dense"] + (["strided", "block_dense"]
                                                      if xp.is_cuda else [])
    algorithm = data.draw(st.sampled_from(algorithms), label="algorithm")
    before = [_snapshot(a) for a in (x, *(f.values for f in chain))]
    # a forced algorithm that cannot run this: the planner's ValueError (an empty batch has
    # nothing to run: its empty result comes first)
    if algorithm != "auto" and 0 not in tuple(x.shape):
        shapes = (tuple(x.shape),) + tuple(patterns)
        runs = {c.name for c in kronlinalg.plan(
            "structured_matmul", *shapes, layout=layout, device=x,
            dtype=dtype if xp.is_cuda or dtype not in ("float16", "bfloat16") else "float32")}
        if algorithm not in runs:
            with pytest.raises(ValueError, match="does not run structured_matmul"):
                structured_matmul(x, chain, layout=layout, algorithm=algorithm)
            return
    out = structured_matmul(x, chain, layout=layout, algorithm=algorithm)
    ref = x64 @ dense.T if layout == "batch_first" else dense @ x64
    assert_close(out, ref, xp, dtype, _rtol(dtype, len(chain)))
    for a, b in zip((x, *(f.values for f in chain)), before):
        np.testing.assert_array_equal(_snapshot(a), b)
