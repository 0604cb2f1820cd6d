"""structured_matmul, KSFactor and KSChain against dense float64 references, on every backend.

The reference is built independently of the code under test: each value [i, k, l, j] is scattered
to row i·b·d + k·d + j, column i·c·d + l·d + j of a float64 NumPy matrix.  Inputs are fresh
random numbers each run (the seed is reported on failure), never zeros.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess

import numpy as np
import pytest

import kronlinalg
from kronlinalg.planner.costs import structured as costs
from kronlinalg import structured_cublas
from kronlinalg import structured
from kronlinalg.structured import KSChain, KSFactor, structured_matmul
from _helpers import RTOL, assert_close, dtype_name, random, to_numpy, to_xp

ALGORITHMS = ("kernel", "bmm", "dense", "auto")
LAYOUTS = ("batch_first", "batch_last")

# a, d > 1, b != c, odd sizes; d = 1 (broadcast path), d % 16 == 0 (direct), d = 17 and 24
# (shuffled expansions), c > 96 (several l blocks), b·d not a multiple of the vector width
PATTERNS = [(1, 1, 1, 1), (3, 4, 6, 5), (2, 7, 3, 4), (4, 2, 2, 3), (1, 33, 130, 2),
            (2, 20, 100, 17), (1, 6, 9, 24), (2, 16, 8, 32), (3, 9, 5, 1)]


def ks_dense_ref(values: np.ndarray) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    a, b, c, d = v.shape
    i, k, l, j = np.meshgrid(*(np.arange(n) for n in v.shape), indexing="ij")
    out = np.zeros((a * b * d, a * c * d))
    out[i * b * d + k * d + j, i * c * d + l * d + j] = v
    return out


def chain_dense_ref(chain) -> np.ndarray:
    out = ks_dense_ref(to_numpy(chain[0].values))
    for f in chain[1:]:
        out = out @ ks_dense_ref(to_numpy(f.values))
    return out


def make_chain(xp, rng, patterns, dtype):
    return KSChain([KSFactor(p, random(xp, rng, p, dtype)[0]) for p in patterns])


def reference(x64, chain, layout):
    w = chain_dense_ref(chain)
    return x64 @ w.T if layout == "batch_first" else w @ x64


def x_for(xp, rng, chain, layout, batch, dtype):
    n = chain.shape[1]
    return random(xp, rng, (batch, n) if layout == "batch_first" else (n, batch), dtype)


def kernel_dtype(xp):
    # the CUDA kernel has no float64 path (float32 and half types); the CPU kernel has both
    return "float32" if xp.is_cuda else "float64"


def rtol_for(dtype, chain):
    # each factor's result is rounded once more in half precision
    return RTOL[dtype] * (len(chain) if dtype in ("float16", "bfloat16") else 1)


# ---------------------------------------------------------------------------------------------
# the containers


def test_factor_to_dense_matches_reference(rng):
    for p in PATTERNS[:6]:
        v = rng.standard_normal(p)
        f = KSFactor(p, v)
        assert f.shape == (p[0] * p[1] * p[3], p[0] * p[2] * p[3])
        np.testing.assert_array_equal(f.to_dense(), ks_dense_ref(v))


def test_factor_from_dense_round_trip(xp, rng):
    p = (2, 3, 4, 3)
    vals, v64 = random(xp, rng, p, "float64")
    back = KSFactor.from_dense(KSFactor(p, vals).to_dense(), p)
    assert back.pattern == p
    np.testing.assert_array_equal(to_numpy(back.values), v64)


def test_from_dense_rejects_entries_outside_the_support(rng):
    p = (2, 3, 4, 3)
    m = ks_dense_ref(rng.standard_normal(p))
    m[0, 1] = 1.0  # row (i=0, k=0, j=0), column (i=0, l=0, j=1): j differs
    with pytest.raises(ValueError, match="matrix: has nonzeros outside the support"):
        KSFactor.from_dense(m, p)
    with pytest.raises(ValueError, match=r"matrix: expected shape .* \(18, 24\)"):
        KSFactor.from_dense(m[:-1], p)


def test_chain_to_dense_and_shape(rng):
    chain = KSChain.random([(1, 6, 4, 2), (2, 4, 3, 1)], rng=rng)
    assert chain.shape == (12, 6)
    assert chain.patterns == ((1, 6, 4, 2), (2, 4, 3, 1))
    np.testing.assert_allclose(chain.to_dense(), chain_dense_ref(chain), rtol=1e-13)


@pytest.mark.parametrize("family, args, patterns", [
    ("butterfly", (8,), [(1, 2, 2, 4), (2, 2, 2, 2), (4, 2, 2, 1)]),
    ("block_butterfly", (12, 3), [(1, 6, 6, 2), (2, 6, 6, 1)]),
    ("monarch", (24, 16, 4), [(1, 6, 4, 4), (4, 4, 4, 1)]),
    ("monarch", (16, 24, 4), [(1, 4, 4, 4), (4, 4, 6, 1)]),
    ("low_rank", (10, 7, 3), [(1, 10, 3, 1), (1, 3, 7, 1)]),
    ("block_diagonal", (12, 9, 3), [(3, 4, 3, 1)]),
])
def test_family_patterns(family, args, patterns):
    chain = getattr(structured, family)(*args, rng=0)
    assert list(chain.patterns) == patterns
    dense = chain.to_dense()
    assert dense.shape == chain.shape and np.all(np.isfinite(dense))


def test_family_arguments_are_checked():
    with pytest.raises(ValueError, match="n: expected a power of two"):
        structured.butterfly(12)
    with pytest.raises(ValueError, match="m: must be divisible by p = 5"):
        structured.monarch(12, 10, 5)
    with pytest.raises(ValueError, match="n: must be divisible by blocks = 4"):
        structured.block_diagonal(8, 6, 4)


def test_random_in_namespace_and_dtype(xp):
    chain = structured.butterfly(8, rng=1, xp=xp.namespace, dtype="float32", device=xp.device)
    for f in chain:
        assert dtype_name(f.values.dtype) == "float32"
        assert type(f.values).__module__.split(".")[0] == type(xp.asarray([1.0])).__module__.split(".")[0]


# ---------------------------------------------------------------------------------------------
# products


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("algorithm", ("kernel", "bmm", "dense"))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: "x".join(map(str, p)))
def test_single_factor(xp, rng, pattern, layout, algorithm, dtype):
    if dtype not in xp.dtypes:
        pytest.skip(f"{xp} has no {dtype}")
    chain = make_chain(xp, rng, [pattern], dtype)
    batch = int(rng.integers(1, 40))
    x, x64 = x_for(xp, rng, chain, layout, batch, dtype)
    if xp.is_cuda and dtype == "float64" and algorithm == "kernel":
        with pytest.raises(ValueError, match="algorithm: .kernel. does not run structured_matmul"):
            structured_matmul(x, chain[0], layout=layout, algorithm=algorithm)
        return
    y = structured_matmul(x, chain[0], layout=layout, algorithm=algorithm)
    assert_close(y, reference(x64, chain, layout), xp, dtype,
                 msg=f"{pattern} B={batch} {layout} {algorithm}: ")


CHAINS = {
    "butterfly16": lambda: structured.butterfly(16, rng=2).patterns,
    "block_butterfly": lambda: structured.block_butterfly(24, 3, rng=2).patterns,
    "monarch_wide": lambda: structured.monarch(16, 24, 4, rng=2).patterns,
    "monarch_tall": lambda: structured.monarch(30, 20, 5, rng=2).patterns,
    "low_rank": lambda: structured.low_rank(20, 18, 3, rng=2).patterns,
    "vit_s16_qkv": lambda: ((1, 192, 48, 2), (2, 48, 192, 1)),
    "vit_s16_mlp": lambda: ((1, 768, 192, 2), (6, 64, 64, 1)),
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", list(CHAINS))
def test_chain(xp, rng, name, layout, algorithm):
    dtype = "float32"
    chain = make_chain(xp, rng, CHAINS[name](), dtype)
    batch = 6 if name.startswith("vit") else int(rng.integers(1, 30))  # ViT chains: B scaled down
    x, x64 = x_for(xp, rng, chain, layout, batch, dtype)
    y = structured_matmul(x, chain, layout=layout, algorithm=algorithm)
    assert_close(y, reference(x64, chain, layout), xp, dtype, msg=f"{name} {layout} {algorithm}: ")


def test_factors_as_sequence_and_chain_agree(xp, rng):
    chain = make_chain(xp, rng, [(1, 4, 3, 2), (2, 3, 5, 1)], "float64")
    x, x64 = x_for(xp, rng, chain, "batch_first", 5, "float64")
    ref = reference(x64, chain, "batch_first")
    assert_close(structured_matmul(x, list(chain)), ref, xp, "float64")
    assert_close(structured_matmul(x, tuple(chain)), ref, xp, "float64")


@pytest.mark.parametrize("algorithm", ("kernel", "bmm", "dense"))
def test_leading_batch_dimensions(xp, rng, algorithm):
    dt = kernel_dtype(xp)
    chain = make_chain(xp, rng, [(2, 3, 5, 3)], dt)
    x, x64 = random(xp, rng, (2, 3, 4, chain.shape[1]), dt)
    y = structured_matmul(x, chain, algorithm=algorithm)
    assert_close(y, x64 @ chain_dense_ref(chain).T, xp, dt)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vector_and_strided_inputs(xp, rng, layout):
    dt = kernel_dtype(xp)
    chain = make_chain(xp, rng, [(3, 4, 2, 5)], dt)
    n = chain.shape[1]
    # a transposed (non-contiguous) x: the kernel makes the contiguous copy it needs
    shape = (7, n) if layout == "batch_first" else (n, 7)
    base, base64 = random(xp, rng, shape[::-1], dt)
    x, x64 = xp.permute_dims(base, (1, 0)), base64.T
    assert_close(structured_matmul(x, chain, layout=layout, algorithm="kernel"),
                 reference(x64, chain, layout), xp, dt)
    # row-strided x (every other row): read in place through the leading dimension
    big, big64 = random(xp, rng, (2 * shape[0], shape[1]), dt)
    x, x64 = big[::2, ...], big64[::2]
    assert_close(structured_matmul(x, chain, layout=layout, algorithm="kernel"),
                 reference(x64, chain, layout), xp, dt)
    if layout == "batch_last":  # a single vector: K @ x
        v, v64 = random(xp, rng, (n,), dt)
        assert_close(structured_matmul(v, chain, layout=layout, algorithm="kernel"),
                     chain_dense_ref(chain) @ v64, xp, dt)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_empty_batch(xp, layout):
    chain = KSChain([KSFactor((2, 3, 4, 1), xp.ones((2, 3, 4, 1), dtype=xp.float32,
                                                    device=xp.device))])
    shape = (0, 8) if layout == "batch_first" else (8, 0)
    y = structured_matmul(xp.zeros(shape, dtype=xp.float32, device=xp.device), chain, layout=layout)
    assert tuple(y.shape) == ((0, 6) if layout == "batch_first" else (6, 0))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", ("kernel", "bmm", "auto"))
def test_half_precision(xp, rng, layout, algorithm):
    halves = [dt for dt in ("float16", "bfloat16") if dt in xp.dtypes]
    if not halves:
        pytest.skip(f"{xp} has no half types")
    for dtype in halves:
        chain = make_chain(xp, rng, [(1, 24, 40, 4), (2, 20, 12, 4)], dtype)
        x, x64 = x_for(xp, rng, chain, layout, 37, dtype)
        y = structured_matmul(x, chain, layout=layout, algorithm=algorithm)
        assert_close(y, reference(x64, chain, layout), xp, dtype, rtol_for(dtype, chain),
                     msg=f"{dtype}: ")


# ---------------------------------------------------------------------------------------------
# "strided": cuBLAS strided-batched GEMMs on views


def _emulate_gemm_strided_batched(calls, buffers):
    """cuBLAS's column-major strided-batched GEMM (alpha = 1, beta = 0) on NumPy buffers:
    `buffers` maps a base address to (flat float64 array, item size)."""
    def view(addr, rows, cols, ld, trans):
        base = max(b for b in buffers if b <= addr)
        buf, item = buffers[base]
        off = (addr - base) // item
        if trans:  # op(A) = Aᵀ of a column-major (cols x rows) matrix
            idx = off + np.arange(rows)[:, None] * ld + np.arange(cols)[None, :]
        else:
            idx = off + np.arange(rows)[:, None] + np.arange(cols)[None, :] * ld
        assert idx.min() >= 0 and idx.max() < buf.size, "a GEMM reads or writes out of bounds"
        return buf, idx

    for ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch in calls:
        item = buffers[max(q for q in buffers if q <= c)][1]
        for t in range(batch):
            abuf, ai = view(a + t * sa * item, m, k, lda, ta)
            bbuf, bi = view(b + t * sb * item, k, n, ldb, tb)
            cbuf, ci = view(c + t * sc * item, m, n, ldc, False)
            cbuf[ci] = abuf[ai] @ bbuf[bi]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ("float16", "float32", "float64"))
def test_cuda_dense_slabs_copy(rng, dtype):
    """ks_cuda.dense_slabs (block_dense's GEMM operand) against NumPy: a > 1, d = 1, odd sizes,
    a NaN-poisoned output with padding that stays untouched; strides that are not C-contiguous
    rejected."""
    cp = pytest.importorskip("cupy")
    if cp.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("no CUDA device")
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    code = {"float32": 0, "float64": 1, "float16": 2}[dtype]
    stream = cp.cuda.get_current_stream().ptr
    for pattern in [(1, 3, 5, 2), (3, 7, 4, 5), (2, 16, 8, 1), (4, 1, 9, 3), (1, 33, 17, 12)]:
        a, b, c, d = pattern
        v = cp.asarray(rng.standard_normal(pattern), dtype=dtype)
        n = a * b * c * d * d
        out = cp.full(n + 7, cp.nan, dtype=dtype)
        item = v.itemsize
        ks_cuda.dense_slabs(pattern, (v.data.ptr,) + tuple(st // item for st in v.strides),
                            out.data.ptr, code, stream)
        got = cp.asnumpy(out).astype(np.float64)
        ref = _dense_slabs_ref(cp.asnumpy(v).astype(np.float64))
        np.testing.assert_array_equal(got[:n].reshape(ref.shape), ref)
        assert np.isnan(got[n:]).all(), "padding written"
    v = cp.asarray(rng.standard_normal((2, 3, 4, 5)), dtype=dtype)
    with pytest.raises(RuntimeError, match="C-contiguous"):
        ks_cuda.dense_slabs((2, 3, 4, 5), (v.data.ptr, 1, 2, 3, 4), out.data.ptr, code, stream)


def _planar_split_ref(x, a, n, d):
    """x (B, a·n·d) rows holding (a, n, d) each -> (a, d, B, n): the planar copy's model."""
    return np.ascontiguousarray(x.reshape(x.shape[0], a, n, d).transpose(1, 3, 0, 2))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("pattern", PATTERNS + [(5, 3, 4, 2), (2, 6, 5, 7)],
                         ids=lambda p: "x".join(map(str, p)))
def test_strided_gemm_indexing(rng, pattern, layout):
    """The strided algorithm's GEMM batches (structured_cublas.strided_calls), run by a NumPy model of
    cuBLAS on padded rows: every output written once with the right value, nothing outside x,
    K or y touched.  batch_first with d > 1 multiplies planar copies of x and y (modelled by
    transposes here; the copies themselves are checked on the GPU)."""
    a, b, c, d = pattern
    assert costs.strided_fits(pattern, layout, 9, 64, 64)
    batch, pad, item = 9, 3, 8
    n, m = a * c * d, a * b * d
    v = rng.standard_normal(pattern)
    kt = np.ascontiguousarray(v.transpose(0, 3, 1, 2))  # (a, d, b, c)
    first = layout == "batch_first"
    planar = costs.planar(pattern, layout)
    assert planar == (first and d > 1)
    x = rng.standard_normal((batch, n + pad) if first else (n, batch + pad))
    y = np.full((batch, m + pad) if first else (m, batch + pad), np.nan)
    X, K, Y = 1 << 40, 2 << 40, 3 << 40
    if planar:  # the GEMMs' operands: contiguous (a·d, B, c) and (a·d, B, b) buffers
        xg = _planar_split_ref(x[:, :n], a, c, d)
        yg = np.full((a, d, batch, b), np.nan)
    else:
        xg, yg = x, y
    calls = structured_cublas.strided_calls(pattern, layout, batch, X, x.shape[1], K, Y, y.shape[1],
                                      item)
    flat_y = yg.reshape(-1)
    _emulate_gemm_strided_batched(calls, {X: (xg.reshape(-1), item), K: (kt.reshape(-1), item),
                                          Y: (flat_y, item)})
    if planar:
        assert np.isfinite(flat_y).all(), "a planar output left unwritten"
        y[:, :m] = flat_y.reshape(a, d, batch, b).transpose(2, 0, 3, 1).reshape(batch, m)
    else:
        y = flat_y.reshape(y.shape)
    w = ks_dense_ref(v)
    got, ref = (y[:, :m], x[:, :n] @ w.T) if first else (y[:, :batch], w @ x[:, :batch])
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert np.isnan(y[:, m:] if first else y[:, batch:]).all(), "padding written"


def _dense_slabs_ref(v):
    """(a, b·d, c·d): the a diagonal blocks of the factor's dense matrix (ks_dense_ref)."""
    a, b, c, d = v.shape
    w = ks_dense_ref(v)
    return np.stack([w[i * b * d:(i + 1) * b * d, i * c * d:(i + 1) * c * d] for i in range(a)])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("pattern", PATTERNS + [(5, 3, 4, 2), (2, 6, 5, 7)],
                         ids=lambda p: "x".join(map(str, p)))
def test_block_dense_gemm_indexing(rng, pattern, layout):
    """block_dense's GEMM batches (structured_cublas.strided_calls of costs.dense_slabs), run by
    a NumPy model of cuBLAS on padded rows of x and y in place, on the factor's dense diagonal
    blocks: every output right, nothing outside x, K or y touched."""
    a, b, c, d = pattern
    gemm = costs.dense_slabs(pattern)
    assert gemm == (a, b * d, c * d, 1)
    batch, pad, item = 9, 3, 8
    assert costs.strided_fits(gemm, layout, batch, 64, 64)
    n, m = a * c * d, a * b * d
    v = rng.standard_normal(pattern)
    first = layout == "batch_first"
    x = rng.standard_normal((batch, n + pad) if first else (n, batch + pad))
    y = np.full((batch, m + pad) if first else (m, batch + pad), np.nan)
    X, K, Y = 1 << 40, 2 << 40, 3 << 40
    calls = structured_cublas.strided_calls(gemm, layout, batch, X, x.shape[1], K, Y, y.shape[1], item)
    _emulate_gemm_strided_batched(calls, {X: (x.reshape(-1), item),
                                          K: (_dense_slabs_ref(v).reshape(-1), item),
                                          Y: (y.reshape(-1), item)})
    w = ks_dense_ref(v)
    got, ref = (y[:, :m], x[:, :n] @ w.T) if first else (y[:, :batch], w @ x[:, :batch])
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert np.isnan(y[:, m:] if first else y[:, batch:]).all(), "padding written"


def test_block_dense_cost_terms():
    """block_dense's model: d times the kernel's flops, the dense blocks formed once (written
    a·b·c·d², read a·b·c·d), one launch more per factor with d > 1, strided's coefficients
    where it has none of its own; it pays only where a > 1 and d > 1."""
    from kronlinalg.planner import profiles

    prof = profiles.KNOWN_GPUS["h100-sxm"]
    info = costs.normalise(((1000, 2 * 5 * 3), (2, 4, 5, 3)), {"layout": "batch_first"})
    t = costs.FAMILIES["block_dense"](info, 2, prof, "float16")
    assert t["gemm_flop"] == pytest.approx(2.0 * 1000 * 2 * 4 * 5 * 3 * 3 / prof.flops("float16"))
    assert t["densify"] == pytest.approx(2 * 4 * 5 * 3 * 4 * 2 / prof.bandwidth)
    assert t["calls"] == pytest.approx(2 * prof.launch_s)
    # a dtype without fitted block_dense entries: strided's, plus its own densify
    coef = costs.coefficients("block_dense", "cuda", "float64", "batch_first", prof)
    strided = costs.coefficients("strided", "cuda", "float64", "batch_first", prof)
    assert coef == {**strided, "densify": 1.0}
    assert costs.block_dense_pays((2, 3, 4, 5))
    assert not costs.block_dense_pays((1, 3, 4, 5))  # dense's own GEMM
    assert not costs.block_dense_pays((2, 3, 4, 1))  # strided's GEMMs


def test_strided_planner_gate():
    """Where the strided candidate applies: any layout and d within cuBLAS's 32-bit sizes (batch_first
    with d > 1 on planar copies); where it pays: all but batch_first with a = d = 1 and
    batch_last with d = 1 (bmm's GEMMs read those in place too)."""
    assert costs.strided_fits((2, 3, 4, 5), "batch_last", 100, 100, 100)
    assert costs.strided_fits((2, 3, 4, 1), "batch_first", 100, 8, 6)
    assert costs.strided_fits((2, 3, 4, 5), "batch_first", 100, 40, 30)
    assert not costs.strided_fits((1, 3, 4, 64), "batch_last", 2**26, 2**26, 2**26)
    assert not costs.strided_fits((1, 3, 2**31, 2), "batch_first", 100, 2**32, 6)
    assert costs.strided_pays((1, 3, 4, 5), "batch_first")
    assert costs.strided_pays((2, 3, 4, 1), "batch_first")
    assert not costs.strided_pays((1, 3, 4, 1), "batch_first")
    assert not costs.strided_pays((2, 3, 4, 1), "batch_last")


@pytest.mark.parametrize("algorithm", ("strided", "block_dense"))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided(xp, rng, layout, algorithm):
    """The cuBLAS algorithms against the float64 reference in every dtype the backend has
    (CUDA with CuPy): strided (batch_first with d > 1 through the planar copies) and block_dense
    (the diagonal blocks formed dense); chains, a > 1, odd sizes, row-strided x, leading batch
    dimensions, non-contiguous values; elsewhere a clear error."""
    from kronlinalg.vendor import cublas

    runs = xp.is_cuda and cublas.available()
    if not runs:
        chain = make_chain(xp, rng, [(2, 3, 4, 1)], "float32")
        x, _ = x_for(xp, rng, chain, layout, 5, "float32")
        with pytest.raises(ValueError, match=f"algorithm: '{algorithm}' does not run structured_matmul"):
            structured_matmul(x, chain, layout=layout, algorithm=algorithm)
        return
    cases = [[p] for p in PATTERNS + [(5, 3, 4, 2), (2, 40, 24, 3), (1, 16, 48, 8)]]
    cases += [list(CHAINS["vit_s16_qkv"]()), [(4, 8, 6, 1), (2, 6, 5, 2)]]
    for dtype in xp.dtypes:
        for pats in cases:
            chain = make_chain(xp, rng, pats, dtype)
            batch = int(rng.integers(1, 50))
            x, x64 = x_for(xp, rng, chain, layout, batch, dtype)
            y = structured_matmul(x, chain, layout=layout, algorithm=algorithm)
            assert_close(y, reference(x64, chain, layout), xp, dtype, rtol_for(dtype, chain),
                         msg=f"{pats} B={batch} {layout} {dtype}: ")
        # row-strided x (every other row) is read in place; leading batch dimensions
        for d in (1, 3):
            chain = make_chain(xp, rng, [(2, 5, 3, d)], dtype)
            n = chain.shape[1]
            big, big64 = random(xp, rng, (14, n) if layout == "batch_first" else (2 * n, 7),
                                dtype)
            assert_close(structured_matmul(big[::2, ...], chain, layout=layout,
                                           algorithm=algorithm),
                         reference(big64[::2], chain, layout), xp, dtype, rtol_for(dtype, chain))
        # values given as a non-contiguous view (taken contiguous before the transposing copy)
        p = (2, 5, 3, 3)
        vt, vt64 = random(xp, rng, p[::-1], dtype)
        chain = KSChain([KSFactor(p, xp.permute_dims(vt, (3, 2, 1, 0)))])
        assert tuple(chain[0].values.shape) == p
        x, x64 = x_for(xp, rng, chain, layout, 11, dtype)
        w = ks_dense_ref(vt64.transpose(3, 2, 1, 0))
        assert_close(structured_matmul(x, chain, layout=layout, algorithm=algorithm),
                     x64 @ w.T if layout == "batch_first" else w @ x64, xp, dtype,
                     rtol_for(dtype, chain))
    if layout == "batch_first":
        for p in [(3, 5, 2, 1), (2, 3, 4, 2)]:
            x, x64 = random(xp, rng, (2, 3, 4, p[0] * p[2] * p[3]), "float32")
            chain = make_chain(xp, rng, [p], "float32")
            assert_close(structured_matmul(x, chain, algorithm=algorithm),
                         x64 @ chain_dense_ref(chain).T, xp, "float32")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ("float16", "float32", "float64"))
def test_cuda_planar_copies(rng, dtype):
    """The planar copies (ks_cuda_planar.cuh) against NumPy transposes, both ways: every d with
    code of its own (d < the vector width, multiples of it, 3·2^k) and d = 5, 7 (one element
    per thread), a > 1, runs that are not whole vectors, rows off the 16-byte grid, one row,
    several blocks and a partial last one; the destination prefilled with NaN, its padding
    columns left untouched."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    tdt = getattr(torch, dtype)
    code = {"float16": 2, "float32": 0, "float64": 1}[dtype]
    stream = torch.cuda.current_stream().cuda_stream
    for a, n, d, batch, pad in [(1, 16, 2, 37, 0), (1, 24, 3, 5, 8), (2, 8, 4, 9, 0),
                                (1, 40, 6, 3, 0), (1, 8, 8, 17, 0), (3, 16, 12, 4, 8),
                                (1, 16, 16, 7, 0), (2, 8, 24, 3, 0), (1, 8, 48, 2, 0),
                                (1, 32, 5, 6, 0), (2, 9, 7, 5, 3), (1, 12, 2, 10, 0),
                                (2, 16, 4, 1, 0), (1, 20, 6, 8, 1), (2, 4, 3, 3, 0),
                                (1, 16, 3, 300, 0), (2, 24, 6, 211, 8), (1, 8, 8, 500, 0)]:
        ld = a * n * d + pad
        x = torch.randn((batch, ld), dtype=torch.float32, device="cuda").to(tdt)
        planar = torch.full((a, d, batch, n), float("nan"), dtype=tdt, device="cuda")
        ks_cuda.planar(True, batch, a, n, d, x.data_ptr(), planar.data_ptr(), ld, code, stream)
        want = _planar_split_ref(x[:, :a * n * d].double().cpu().numpy(), a, n, d)
        np.testing.assert_array_equal(planar.double().cpu().numpy(), want,
                                      err_msg=f"split a={a} n={n} d={d} B={batch} ld={ld}")
        src = torch.randn((a, d, batch, n), dtype=torch.float32, device="cuda").to(tdt)
        y = torch.full((batch, ld), float("nan"), dtype=tdt, device="cuda")
        ks_cuda.planar(False, batch, a, n, d, src.data_ptr(), y.data_ptr(), ld, code, stream)
        got = y.double().cpu().numpy()
        want = src.double().cpu().numpy().transpose(2, 0, 3, 1).reshape(batch, a * n * d)
        np.testing.assert_array_equal(got[:, :a * n * d], want,
                                      err_msg=f"merge a={a} n={n} d={d} B={batch} ld={ld}")
        assert np.isnan(got[:, a * n * d:]).all(), "padding written"
    with pytest.raises(RuntimeError, match="leading dimension"):
        ks_cuda.planar(True, 4, 1, 8, 2, x.data_ptr(), planar.data_ptr(), 15, code, stream)


def test_dtype_promotion(xp, rng):
    chain = make_chain(xp, rng, [(2, 3, 4, 2)], "float64")
    x, x64 = x_for(xp, rng, chain, "batch_first", 5, "float32")
    y = structured_matmul(x, chain, algorithm="bmm" if xp.is_cuda else "kernel")
    assert_close(y, reference(x64, chain, "batch_first"), xp, "float64", 1e-6)


def test_torch_autograd_flows_through_the_library(rng):
    torch = pytest.importorskip("torch")
    v = torch.tensor(rng.standard_normal((2, 3, 4, 2)), requires_grad=True)
    x = torch.tensor(rng.standard_normal((5, 16)), requires_grad=True)
    y = structured_matmul(x, KSFactor((2, 3, 4, 2), v), algorithm="kernel")
    y.sum().backward()
    dense = ks_dense_ref(v.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), np.ones((5, 12)) @ dense, rtol=1e-12)
    assert v.grad is not None and v.grad.shape == v.shape


# ---------------------------------------------------------------------------------------------
# the kernels' ABI: every output element is written (poisoned outputs), bad descriptions fail


def _poisoned_cpu(pattern, batch, layout, dtype, rng):
    from kronlinalg.testing import extension
    ks_cpu = extension("structured_cpu")

    a, b, c, d = pattern
    v = rng.standard_normal(pattern).astype(dtype)
    n, m = a * c * d, a * b * d
    x = rng.standard_normal((batch, n) if layout == 0 else (n, batch)).astype(dtype)
    y = np.full((batch, m) if layout == 0 else (m, batch), np.nan, dtype=dtype)
    ks_cpu.matmul(pattern, batch, layout, (v.ctypes.data,) + tuple(s // v.itemsize for s in v.strides),
                  (x.ctypes.data, x.shape[1]), (y.ctypes.data, y.shape[1]),
                  0 if dtype == np.float32 else 1)
    w = ks_dense_ref(v)
    ref = x.astype(np.float64) @ w.T if layout == 0 else w @ x.astype(np.float64)
    return y, ref


@pytest.mark.parametrize("layout", (0, 1))
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_cpu_kernel_writes_every_output(rng, layout, dtype):
    # sizes that leave partial vectors and row tiles on every axis, and several l blocks
    for pattern, batch in [((2, 7, 130, 3), 45), ((1, 17, 5, 1), 13), ((3, 5, 9, 16), 7),
                           ((1, 40, 200, 6), 300)]:
        y, ref = _poisoned_cpu(pattern, batch, layout, dtype, rng)
        assert np.all(np.isfinite(y)), f"{pattern}: unwritten outputs"
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        assert err < (1e-5 if dtype == np.float32 else 1e-12), (pattern, err)


def test_cpu_kernel_rejects_bad_descriptions():
    from kronlinalg.testing import extension
    ks_cpu = extension("structured_cpu")

    x = np.ones((4, 6), dtype=np.float32)
    y = np.empty((4, 6), dtype=np.float32)
    v = np.ones((1, 6, 6, 1), dtype=np.float32)
    vd = (v.ctypes.data, 36, 6, 1, 1)
    with pytest.raises(RuntimeError, match="pattern entries must be >= 1"):
        ks_cpu.matmul((0, 6, 6, 1), 4, 0, vd, (x.ctypes.data, 6), (y.ctypes.data, 6), 0)
    with pytest.raises(RuntimeError, match="leading dimension"):
        ks_cpu.matmul((1, 6, 6, 1), 4, 0, vd, (x.ctypes.data, 3), (y.ctypes.data, 6), 0)
    with pytest.raises(RuntimeError, match="layout"):
        ks_cpu.matmul((1, 6, 6, 1), 4, 7, vd, (x.ctypes.data, 6), (y.ctypes.data, 6), 0)
    with pytest.raises(RuntimeError, match="unsupported dtype"):
        ks_cpu.matmul((1, 6, 6, 1), 4, 0, vd, (x.ctypes.data, 6), (y.ctypes.data, 6), 2)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", (0, 1))
@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_cuda_kernel_writes_every_output(rng, layout, dtype):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    if ks_cuda is None:
        pytest.fail("a CUDA device is present but kronlinalg was built without CUDA")
    tdt = getattr(torch, dtype)
    for pattern, batch in [((2, 7, 130, 3), 45), ((1, 48, 192, 2), 257), ((3, 64, 16, 24), 33),
                           ((4, 2, 2, 16), 1000), ((1, 17, 5, 1), 13)]:
        a, b, c, d = pattern
        n, m = a * c * d, a * b * d
        v = torch.tensor(rng.standard_normal(pattern), dtype=tdt, device="cuda")
        x = torch.tensor(rng.standard_normal((batch, n) if layout == 0 else (n, batch)),
                         dtype=tdt, device="cuda")
        y = torch.full((batch, m) if layout == 0 else (m, batch), float("nan"), dtype=tdt,
                       device="cuda")
        ks_cuda.matmul(pattern, batch, layout, (v.data_ptr(),) + tuple(v.stride()),
                       (x.data_ptr(), x.shape[1]), (y.data_ptr(), y.shape[1]),
                       {"float32": 0, "float16": 2, "bfloat16": 3}[dtype],
                       torch.cuda.current_stream().cuda_stream)
        got = y.float().cpu().numpy().astype(np.float64)
        assert np.all(np.isfinite(got)), f"{pattern} {dtype}: unwritten outputs"
        w = ks_dense_ref(v.float().cpu().numpy())
        x64 = x.float().cpu().numpy().astype(np.float64)
        ref = x64 @ w.T if layout == 0 else w @ x64
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err < RTOL[dtype], (pattern, dtype, err)


# ---------------------------------------------------------------------------------------------
# bad input: clear errors naming the argument


def test_bad_patterns_and_values():
    with pytest.raises(ValueError, match=r"pattern: pattern entries must be positive"):
        KSFactor((2, 0, 3, 1), np.ones((2, 0, 3, 1)))
    with pytest.raises(ValueError, match=r"pattern: expected a pattern \(a, b, c, d\)"):
        KSFactor((2, 3, 1), np.ones((2, 3, 1)))
    with pytest.raises(TypeError, match="pattern: pattern entries must be integers"):
        KSFactor((2, 3.5, 1, 1), np.ones((2, 3, 1, 1)))
    with pytest.raises(ValueError, match=r"values: expected shape \(a, b, c, d\) = \(2, 3, 4, 1\)"):
        KSFactor((2, 3, 4, 1), np.ones((2, 4, 3, 1)))
    with pytest.raises(TypeError, match="values: expected a real floating-point array"):
        KSFactor((1, 2, 2, 1), np.ones((1, 2, 2, 1), dtype=np.int64))
    with pytest.raises(TypeError, match="values: expected an array"):
        KSFactor((1, 2, 2, 1), [[1.0]])


def test_chains_must_chain():
    f1 = KSFactor((1, 4, 3, 2), np.ones((1, 4, 3, 2)))  # 8 x 6
    f2 = KSFactor((1, 5, 2, 1), np.ones((1, 5, 2, 1)))  # 5 x 2
    with pytest.raises(ValueError, match="factors: factor 0 .* has 6 columns but factor 1 .* has 5 rows"):
        KSChain([f1, f2])
    with pytest.raises(ValueError, match="factors: factor 0"):
        structured_matmul(np.ones((2, 2)), [f1, f2])
    with pytest.raises(ValueError, match="factors: expected at least one KSFactor"):
        KSChain([])
    with pytest.raises(TypeError, match=r"factors\[1\]: expected a KSFactor"):
        KSChain([f1, np.ones((6, 6))])


def test_bad_x():
    f = KSFactor((2, 3, 4, 1), np.ones((2, 3, 4, 1)))  # 6 x 8
    with pytest.raises(ValueError, match=r"x: last dimension must equal .* = 8 .* got shape \(3, 6\)"):
        structured_matmul(np.ones((3, 6)), f)
    with pytest.raises(ValueError, match=r"x: first dimension must equal .* = 8 .*batch_last"):
        structured_matmul(np.ones((6, 3)), f, layout="batch_last")
    with pytest.raises(ValueError, match="x: layout='batch_last' takes x of shape"):
        structured_matmul(np.ones((2, 8, 3)), f, layout="batch_last")
    with pytest.raises(TypeError, match="x: expected a real floating-point array"):
        structured_matmul(np.ones((3, 8), dtype=np.int32), f)
    with pytest.raises(ValueError, match="x: expected at least 1 dimension"):
        structured_matmul(np.float64(1.0), f)
    with pytest.raises(ValueError, match="layout: expected one of"):
        structured_matmul(np.ones((3, 8)), f, layout="rows")
    with pytest.raises(ValueError, match="algorithm: expected one of"):
        structured_matmul(np.ones((3, 8)), f, algorithm="fast")
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"factors\[0\].values: array from .*numpy"):
        structured_matmul(torch.ones((3, 8), dtype=torch.float64), f)


# ---------------------------------------------------------------------------------------------
# the planner sees the three candidates


def test_planner_ranks_the_candidates():
    choices = kronlinalg.plan("structured_matmul", (2048, 384), (1, 768, 192, 2), (6, 64, 64, 1),
                              dtype="float32")
    assert {c.name for c in choices} == {"kernel", "bmm", "dense"}
    for dev in ("cpu", "h100-sxm"):
        for layout in LAYOUTS:
            shape = (25088, 384) if layout == "batch_first" else (384, 25088)
            choices = kronlinalg.plan("structured_matmul", shape, (1, 768, 192, 2),
                                      (6, 64, 64, 1), dtype="float32", device=dev, layout=layout)
            assert all(c.seconds > 0 and math.isfinite(c.seconds) for c in choices)
    text = kronlinalg.explain("structured_matmul", (64, 16), (1, 4, 4, 4), file=None)
    assert "kernel" in text and "bmm" in text and "dense" in text
    with pytest.raises(ValueError, match="shapes: x's last dimension must be 16"):
        kronlinalg.plan("structured_matmul", (64, 15), (1, 4, 4, 4))


# ---------------------------------------------------------------------------------------------
# the CUDA kernels' indexing, checked on the CPU (kernels/structured/ks_cuda_emulate.cpp runs them
# thread by thread with mma.sync emulated): for machines without a GPU; about a minute, opt-in


@pytest.mark.slow
def test_cuda_kernels_on_the_cpu_emulator(tmp_path):
    if not os.environ.get("KRONLINALG_EMULATE_CUDA"):
        pytest.skip("set KRONLINALG_EMULATE_CUDA=1 to build and run the CUDA emulator (~1 min)")
    gxx = shutil.which("g++")
    cuda = next((d for d in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda")
                 if d and os.path.exists(os.path.join(d, "include", "cuda_fp16.h"))), None)
    if gxx is None or cuda is None:
        pytest.skip("needs g++ and the CUDA headers")
    src = os.path.join(os.path.dirname(__file__), "..", "kernels")
    exe = str(tmp_path / "ks_emulate")
    subprocess.run([gxx, "-std=c++20", "-O1", "-pthread", "-DKL_KS_EMULATE",
                    f"-I{cuda}/include", f"-I{src}/structured", f"-I{src}/include",
                    f"-I{src}/common", f"{src}/structured/ks_cuda_emulate.cpp",
                    f"{src}/common/status.cpp", "-o", exe], check=True)
    out = subprocess.run([exe], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:]


# ---------------------------------------------------------------------------------------------
# the CUDA cost model (pure Python: checked without a GPU, on the H100 table profile)


def _cuda_seconds(name, pattern, dtype, layout, prof, batch=25088, without=()):
    """The CUDA predictor's time; `without`: terms left out (e.g. the kernel's "interleaved"
    margin, a bias of the planner rather than a prediction)."""
    from kronlinalg.planner import Problem

    a, b, c, d = pattern
    x = (batch, a * c * d) if layout == "batch_first" else (a * c * d, batch)
    info = costs.normalise((x, pattern), {"layout": layout})
    info["fp32_mode"] = structured.float32_precision()  # (the operation's fact)
    problem = Problem("structured_matmul", (x, pattern), dtype, "h100-sxm", "cuda",
                      {"layout": layout}, info)
    seconds, detail = costs.predictor(name, "cuda")(problem, prof)
    return seconds - sum(v for k, v in detail["terms"].items() if k in without)


def test_cuda_cost_model_on_the_h100():
    from kronlinalg.planner import profiles

    prof = profiles.KNOWN_GPUS["h100-sxm"]
    pick = lambda p, dt, lay: min(("kernel", "bmm", "dense"),  # noqa: E731
                                  key=lambda n: _cuda_seconds(n, p, dt, lay, prof))
    # measured on an H100 (benchmarks/structured_compare.py, batch 25088): the kernel wins by
    # 3-4x (float32 on 3xTF32 tensor cores, float16)
    assert pick((2, 64, 64, 4), "float32", "batch_first") == "kernel"
    assert pick((1, 64, 64, 128), "float32", "batch_first") == "kernel"
    assert pick((4, 512, 512, 4), "float32", "batch_last") == "kernel"
    assert pick((2, 64, 64, 4), "float16", "batch_first") == "kernel"
    # half types: tensor-core GEMMs beat the kernel on a dense block (a = d = 1: 0.076 ms dense
    # against 0.135 ms)
    assert pick((1, 768, 768, 1), "float16", "batch_first") != "kernel"
    # the pipelined kernel takes both layouts alike (0.152 / 0.150 ms), its predictions too once
    # the batch_first margin is left out
    first = _cuda_seconds("kernel", (1, 192, 192, 8), "float16", "batch_first", prof,
                          without=("interleaved",))
    last = _cuda_seconds("kernel", (1, 192, 192, 8), "float16", "batch_last", prof)
    assert 0.7 < last / first < 1.3


def test_cuda_coefficients_precedence():
    import dataclasses

    from kronlinalg.planner import profiles

    base = "structured_matmul/kernel/cuda"
    prof = profiles.KNOWN_GPUS["h100-sxm"]
    c = costs.coefficients("kernel", "cuda", "float16", "batch_last", prof)
    assert c == {**costs.DEFAULT_COEF[base],
                 **costs.DEFAULT_COEF.get(f"{base}/float16/batch_last", {})}
    # a profile's stored coefficients override the built-in ones, the specific key last
    mine = dataclasses.replace(prof, coef={base: {"flop": 7.0, "tiles": 3.0},
                                           f"{base}/float16": {"flop": 5.0}})
    c = costs.coefficients("kernel", "cuda", "float16", "batch_last", mine)
    assert c["flop"] == 5.0 and c["tiles"] == 3.0
    assert costs.coefficients("kernel", "cuda", "float32", "batch_last", mine)["flop"] == 7.0
    # the CPU families keep their single key
    assert costs.coefficients("kernel", "cpu", "float32", "batch_first",
                                    profiles.profile_for("cpu")) == {
        **costs.DEFAULT_COEF["structured_matmul/kernel/cpu"],
        **profiles.profile_for("cpu").coef.get("structured_matmul/kernel/cpu", {})}


@pytest.mark.gpu
@pytest.mark.parametrize("layout", (0, 1))
def test_cuda_float32_tiles_for_every_d(rng, layout):
    """float32 CUDA kernel on the d that pick other tiles: whole-d (d = 3, 6), TJ = 4 for d = 12,
    TJ = 8 for d % 16 == 0; several l chunks, aligned and misaligned leading dimensions."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    for pattern, batch, pad in [((1, 96, 48, 3), 130, 0), ((2, 40, 24, 3), 67, 3),
                                ((1, 64, 48, 6), 129, 0), ((3, 33, 20, 6), 70, 1),
                                ((1, 48, 32, 12), 65, 0), ((1, 20, 16, 48), 40, 2),
                                ((2, 16, 24, 16), 300, 0)]:
        a, b, c, d = pattern
        n, m = a * c * d, a * b * d
        v = torch.tensor(rng.standard_normal(pattern), dtype=torch.float32, device="cuda")
        xs = (batch, n + pad) if layout == 0 else (n, batch + pad)
        ys = (batch, m + pad) if layout == 0 else (m, batch + pad)
        x = torch.tensor(rng.standard_normal(xs), dtype=torch.float32, device="cuda")
        y = torch.full(ys, float("nan"), dtype=torch.float32, device="cuda")
        ks_cuda.matmul(pattern, batch, layout, (v.data_ptr(),) + tuple(v.stride()),
                       (x.data_ptr(), xs[1]), (y.data_ptr(), ys[1]), 0,
                       torch.cuda.current_stream().cuda_stream)
        yn, xn = y.cpu().numpy().astype(np.float64), x.cpu().numpy().astype(np.float64)
        got = yn[:, :m] if layout == 0 else yn[:, :batch]
        assert np.all(np.isnan(yn[:, m:] if layout == 0 else yn[:, batch:])), "padding written"
        w = ks_dense_ref(v.cpu().numpy())
        ref = xn[:, :n] @ w.T if layout == 0 else w @ xn[:, :batch]
        assert np.all(np.isfinite(got)), f"{pattern}: unwritten outputs"
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err < 1e-5, (pattern, layout, err)


# KRONLINALG_KS_KT=1: the runs of 8 j's read K pre-transposed (ks_cuda_launch.cuh,
# transposed_values_pay), which the test shapes are too small to take on their own.
KT_MODES = ("auto", "transposed")
# KRONLINALG_KS_WGMMA: the half types batch_first run on warpgroup MMAs on an sm_90
# (launch_pipe_wgmma in ks_cuda_launch.cuh); "off" keeps the mma.sync shapes for these tests.
WGMMA_MODES = ("auto", "off")


def _kt_mode(monkeypatch, kt, d):
    """Switch the launcher to the pre-transposed K; False where the shape has no such variant."""
    if kt == "auto":
        return True
    monkeypatch.setenv("KRONLINALG_KS_KT", "1")
    return d % 8 == 0 or (d % 4 == 0 and d > 4)  # runs of 8 j, or of 4 j (not the d = 4 span)


@pytest.mark.gpu
@pytest.mark.parametrize("kt", KT_MODES)
@pytest.mark.parametrize("layout", (0, 1))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("wgmma", WGMMA_MODES)
def test_cuda_pipelined_tiles_for_every_d(rng, monkeypatch, layout, dtype, kt, wgmma):
    """The pipelined tensor-core kernel (c % 8 == 0, x_ld % 8 == 0; float32 as 3xTF32, held to
    float32's tolerance): every tile (d = 1 with both k tiles and float32's 4-warp tiles, the
    whole-d spans d = 2, 3, 6, runs of 8 and 4 j, TJ = 1 and 2 for other d), tails in the batch, in b
    and in the l chunks, several chunks (c > 3 stages), a > 1; a misaligned leading dimension
    takes the other kernel; y rows off the 16-byte grid take scalar stores.  Padding columns of
    y must stay untouched."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    if wgmma == "off":
        monkeypatch.setenv("KRONLINALG_KS_WGMMA", "0")
    monkeypatch.setenv("KRONLINALG_KS_NATURAL", "0")  # (test_cuda_natural_tiles covers it)
    tdt = getattr(torch, dtype)
    for pattern, batch, pad in [((1, 48, 200, 1), 301, 0), ((2, 130, 24, 1), 77, 8),
                                ((1, 256, 136, 1), 150, 8), ((1, 640, 320, 1), 70, 0),
                                ((1, 64, 40, 2), 129, 0), ((3, 40, 16, 3), 70, 8),
                                ((1, 20, 56, 4), 65, 0), ((2, 33, 8, 6), 100, 0),
                                ((1, 48, 72, 8), 67, 8), ((2, 24, 32, 12), 90, 0),
                                ((1, 16, 48, 24), 40, 0), ((1, 72, 104, 16), 150, 16),
                                ((2, 48, 64, 4), 99, 3), ((1, 24, 16, 10), 50, 0),
                                ((1, 40, 24, 5), 33, 0), ((2, 64, 48, 6), 300, 8),
                                ((3, 24, 40, 8), 70, 8)]:
        a, b, c, d = pattern
        if not _kt_mode(monkeypatch, kt, d):
            continue
        n, m = a * c * d, a * b * d
        v = torch.tensor(rng.standard_normal(pattern), dtype=tdt, device="cuda")
        # pad % 8 == 0: rows start 16-byte aligned (batch_last rounds the batch up first)
        ld_b = -(-batch // 8) * 8 + pad if pad % 8 == 0 else batch + pad
        xs = (batch, n + pad) if layout == 0 else (n, ld_b)
        y_odd = batch % 2  # odd batches also get y rows off the 16-byte grid (scalar stores)
        ys = (batch, m + pad + y_odd) if layout == 0 else (m, ld_b + y_odd)
        x = torch.tensor(rng.standard_normal(xs), dtype=tdt, device="cuda")
        y = torch.full(ys, float("nan"), dtype=tdt, device="cuda")
        ks_cuda.matmul(pattern, batch, layout, (v.data_ptr(),) + tuple(v.stride()),
                       (x.data_ptr(), xs[1]), (y.data_ptr(), ys[1]),
                       {"float32": 0, "float16": 2, "bfloat16": 3}[dtype],
                       torch.cuda.current_stream().cuda_stream)
        yn = y.float().cpu().numpy().astype(np.float64)
        xn = x.float().cpu().numpy().astype(np.float64)
        got = yn[:, :m] if layout == 0 else yn[:, :batch]
        assert np.all(np.isnan(yn[:, m:] if layout == 0 else yn[:, batch:])), "padding written"
        assert np.all(np.isfinite(got)), f"{pattern}: unwritten outputs"
        w = ks_dense_ref(v.float().cpu().numpy())
        ref = xn[:, :n] @ w.T if layout == 0 else w @ xn[:, :batch]
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err < RTOL[dtype], (pattern, layout, dtype, err)


@pytest.mark.gpu
@pytest.mark.parametrize("kt", KT_MODES)
@pytest.mark.parametrize("layout", (0, 1))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("wgmma", WGMMA_MODES)
def test_cuda_wide_tiles_for_every_d(rng, monkeypatch, layout, dtype, kt, wgmma):
    """The half types' wide tiles (launch_pipe_wide: 16 or 12 warps, one block per SM), taken
    where they pay and still give every SM two tiles: each shape (and the narrow ones at the
    same batches where they do not pay), with tails in the batch, in b and in the l chunks,
    a > 1; the cost model's tile agrees with the launcher's.  Padding columns of y stay
    untouched."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    if wgmma == "off":
        monkeypatch.setenv("KRONLINALG_KS_WGMMA", "0")
    monkeypatch.setenv("KRONLINALG_KS_NATURAL", "0")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tdt = getattr(torch, dtype)
    for pattern, pad in [((1, 128, 256, 2), 0), ((1, 256, 136, 3), 8), ((1, 200, 168, 6), 0),
                         ((1, 40, 32, 8), 8), ((2, 24, 16, 16), 0), ((1, 130, 136, 12), 8),
                         ((1, 128, 128, 8), 0)]:
        a, b, c, d = pattern
        if not _kt_mode(monkeypatch, kt, d):
            continue
        first = layout == 0
        # the launcher's own tile for a batch that fills the device (kl_ks_cuda_tile)
        tn, tk, _, tj, _ = ks_cuda.tile(pattern, 1 << 30, layout, 2, sms)
        # the least batch that gives 2 tiles per SM, plus a partial batch tile
        per_tile = a * -(-d // tj) * -(-b // tk)
        # (batch_last: a multiple of 8, x's row stride, which the pipelined kernels need)
        batch = -(-2 * sms // per_tile) * tn + tn // 2 + (1 if layout == 0 else 8)
        assert tuple(ks_cuda.tile(pattern, batch, layout, 2, sms)[:2]) == (tn, tk)
        n, m = a * c * d, a * b * d
        v = torch.tensor(rng.standard_normal(pattern), dtype=tdt, device="cuda")
        ld_b = -(-batch // 8) * 8 + pad
        xs = (batch, n + pad) if layout == 0 else (n, ld_b)
        ys = (batch, m + pad) if layout == 0 else (m, ld_b)
        x = torch.randn(xs, dtype=torch.float32, device="cuda").to(tdt)
        y = torch.full(ys, float("nan"), dtype=tdt, device="cuda")
        ks_cuda.matmul(pattern, batch, layout, (v.data_ptr(),) + tuple(v.stride()),
                       (x.data_ptr(), xs[1]), (y.data_ptr(), ys[1]),
                       {"float16": 2, "bfloat16": 3}[dtype],
                       torch.cuda.current_stream().cuda_stream)
        w = torch.tensor(ks_dense_ref(v.double().cpu().numpy()), device="cuda")
        xd = x.double()
        ref = xd[:, :n] @ w.T if layout == 0 else w @ xd[:, :batch]
        yd = y.double()
        got = yd[:, :m] if layout == 0 else yd[:, :batch]
        rest = yd[:, m:] if layout == 0 else yd[:, batch:]
        assert bool(torch.isnan(rest).all()), ("padding written", pattern)
        assert bool(torch.isfinite(got).all()), f"{pattern}: unwritten outputs"
        err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
        assert err < RTOL[dtype], (pattern, layout, dtype, err)


def _half_batch_first_error(rng, pattern, batch, pad, dtype):
    """Relative error of the CUDA extension's half-type batch_first product (x rows padded by
    pad // 8 * 8 elements, y rows by pad, y prefilled with NaN) against a float64 reference,
    after checking that y's padding stayed untouched and every output was written."""
    import torch
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    tdt = getattr(torch, dtype)
    a, b, c, d = pattern
    n, m = a * c * d, a * b * d
    v = torch.tensor(rng.standard_normal(pattern), dtype=tdt, device="cuda")
    xs = (batch, n + (pad // 8) * 8)
    ys = (batch, m + pad)
    x = torch.randn(xs, dtype=torch.float32, device="cuda").to(tdt)
    y = torch.full(ys, float("nan"), dtype=tdt, device="cuda")
    ks_cuda.matmul(pattern, batch, 0, (v.data_ptr(),) + tuple(v.stride()),
                   (x.data_ptr(), xs[1]), (y.data_ptr(), ys[1]),
                   {"float16": 2, "bfloat16": 3}[dtype],
                   torch.cuda.current_stream().cuda_stream)
    w = torch.tensor(ks_dense_ref(v.double().cpu().numpy()), device="cuda")
    ref = x.double()[:, :n] @ w.T
    yd = y.double()
    got = yd[:, :m]
    assert bool(torch.isnan(yd[:, m:]).all()), ("padding written", pattern)
    assert bool(torch.isfinite(got).all()), f"{pattern}: unwritten outputs"
    return float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))


@pytest.mark.gpu
@pytest.mark.parametrize("wgmma", ("on", "off"))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_cuda_wgmma_tiles_for_every_d(rng, monkeypatch, dtype, wgmma):
    """The warpgroup-MMA shapes (d = 1, the spans d = 2, 4, 6; other d keep mma.sync when
    forced), batch_first, against a float64 reference: tails in the batch (several warpgroup rows), in b
    (several k tiles, a partial one) and in c (several l chunks, more than the stages, a
    partial one), a > 1, odd leading dimensions of y (scalar stores), padding columns of y left
    untouched; the same with the mma.sync shapes."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")

    monkeypatch.setenv("KRONLINALG_KS_WGMMA", "1" if wgmma == "on" else "0")
    monkeypatch.setenv("KRONLINALG_KS_NATURAL", "0")
    for pattern, batch, pad in [((1, 200, 296, 1), 301, 8), ((2, 136, 40, 1), 77, 0),
                                ((1, 72, 200, 2), 257, 8), ((3, 130, 16, 2), 65, 0),
                                ((1, 264, 136, 3), 129, 0), ((2, 24, 8, 3), 70, 8),
                                ((1, 136, 104, 4), 99, 1), ((1, 40, 48, 6), 150, 0),
                                ((2, 72, 136, 6), 67, 8), ((1, 130, 72, 8), 64, 0),
                                ((2, 24, 40, 12), 90, 8), ((1, 16, 48, 24), 40, 0),
                                ((1, 9, 8, 16), 1, 0)]:
        err = _half_batch_first_error(rng, pattern, batch, pad, dtype)
        assert err < RTOL[dtype], (pattern, dtype, wgmma, err)


def test_float32_precision_switch(rng):
    """float32_precision: validated, round-trips, and the CUDA cost model follows it (3xTF32 on
    tensor cores is predicted faster than CUDA-core FMAs on a compute-heavy pattern)."""
    from kronlinalg.planner import profiles

    prof = profiles.KNOWN_GPUS["h100-sxm"]
    start = structured.float32_precision()
    assert start in ("tf32x3", "ieee")
    with pytest.raises(ValueError, match="precision"):
        structured.float32_precision("tf32")
    try:
        structured.float32_precision("tf32x3")
        fast = _cuda_seconds("kernel", (1, 512, 512, 8), "float32", "batch_first", prof)
        assert structured.float32_precision("ieee") == "tf32x3"
        assert structured.float32_precision() == "ieee"
        slow = _cuda_seconds("kernel", (1, 512, 512, 8), "float32", "batch_first", prof)
        assert slow > 1.2 * fast
    finally:
        structured.float32_precision(start)
    assert structured.float32_precision() == start


@pytest.mark.gpu
def test_cuda_float32_precision_modes(rng):
    """The two float32 modes on the GPU: both within float32's tolerance on a long reduction
    (c = 1024), IEEE FMAs closer, and the results differ (the switch reaches the kernel)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    p = (1, 64, 1024, 2)
    v = torch.tensor(rng.standard_normal(p), dtype=torch.float32, device="cuda")
    x = torch.tensor(rng.standard_normal((200, 2048)), dtype=torch.float32, device="cuda")
    f = structured.KSFactor(p, v)
    ref = x.double().cpu().numpy() @ ks_dense_ref(v.double().cpu().numpy()).T
    start = structured.float32_precision()
    errs = {}
    try:
        for mode in ("tf32x3", "ieee"):
            structured.float32_precision(mode)
            got = structured.structured_matmul(x, f, algorithm="kernel").double().cpu().numpy()
            errs[mode] = (got, np.linalg.norm(got - ref) / np.linalg.norm(ref))
    finally:
        structured.float32_precision(start)
    assert errs["tf32x3"][1] < 1e-5 and errs["ieee"][1] < 2e-6, {k: e for k, (_, e) in errs.items()}
    assert not np.array_equal(errs["tf32x3"][0], errs["ieee"][0])


# ---------------------------------------------------------------------------------------------
# measured planning: structured.tune and planner.record


def test_tune_makes_the_measured_fastest_what_auto_runs(rng):
    from kronlinalg import planner

    f = structured.KSFactor.random((2, 6, 5, 3), rng=rng, dtype=np.float64)
    x = rng.standard_normal((37, 30))
    shapes = ((37, 30), (2, 6, 5, 3))
    opts = dict(dtype="float64", device="cpu", layout="batch_first")
    try:
        times = structured.tune(x, f, repeats=3)
        assert set(times) == {"kernel", "bmm", "dense"}
        assert list(times.values()) == sorted(times.values()) and min(times.values()) > 0
        best = planner.plan("structured_matmul", *shapes, **opts)
        assert [c.name for c in best] == list(times) and best[0].details["measured"]
        assert planner.choose("structured_matmul", *shapes, **opts) == next(iter(times))
        # a recorded ranking decides what auto runs, and auto still computes the product
        planner.record("structured_matmul", *shapes, times={"dense": 1e-6, "kernel": 1.0},
                       **opts)
        assert planner.choose("structured_matmul", *shapes, **opts) == "dense"
        ref = x @ ks_dense_ref(np.asarray(f.values)).T
        np.testing.assert_allclose(structured.structured_matmul(x, f), ref, rtol=1e-12)
    finally:
        planner.clear_cache()
    assert "measured" not in planner.plan("structured_matmul", *shapes, **opts)[0].details


@pytest.mark.gpu
def test_tune_on_cuda_arrays(rng):
    """structured.tune on CUDA arrays (CuPy, torch): every candidate timed, auto runs the
    measured fastest and still computes the product."""
    from kronlinalg.vendor import cublas
    from kronlinalg import planner

    libs = []
    for name in ("cupy", "torch"):
        try:
            mod = __import__(name)
        except ImportError:
            continue
        if name == "cupy" and mod.cuda.runtime.getDeviceCount() > 0:
            libs.append(lambda a, mod=mod: mod.asarray(a))
        if name == "torch" and mod.cuda.is_available():
            libs.append(lambda a, mod=mod: mod.tensor(a, device="cuda"))
    if not libs:
        pytest.skip("no CUDA device")
    v = rng.standard_normal((2, 16, 8, 4)).astype(np.float32)
    x = rng.standard_normal((300, 64)).astype(np.float32)
    ref = x.astype(np.float64) @ ks_dense_ref(v.astype(np.float64)).T
    for to in libs:
        f = structured.KSFactor((2, 16, 8, 4), to(v))
        try:
            times = structured.tune(to(x), f, repeats=2)
            # strided (batch_first with d > 1 on planar copies) and block_dense, where CuPy's
            # cuBLAS is there
            strided = {"strided", "block_dense"} if cublas.available() else set()
            assert set(times) == {"kernel", "bmm", "dense"} | strided
            out = structured.structured_matmul(to(x), f)
            got = out.get() if hasattr(out, "get") else out.cpu().numpy()
            assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-5
        finally:
            planner.clear_cache()


def test_record_and_tune_reject_bad_input(rng):
    from kronlinalg import planner

    with pytest.raises(ValueError, match="times"):
        planner.record("structured_matmul", (4, 6), (1, 6, 6, 1), times={})
    with pytest.raises(ValueError, match="not candidates"):
        planner.record("structured_matmul", (4, 6), (1, 6, 6, 1), times={"magic": 1.0})
    f = structured.KSFactor.random((1, 6, 6, 1), rng=rng, dtype=np.float64)
    with pytest.raises(ValueError, match="repeats"):
        structured.tune(np.ones((4, 6)), f, repeats=0)


# ---------------------------------------------------------------------------------------------
# repeated calls (CUDA arrays take a per-signature fast path after the first call)


@pytest.mark.parametrize("algorithm", ("auto", "kernel", "strided", "bmm", "dense"))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_repeated_calls_take_fresh_operands(xp, rng, layout, algorithm):
    """Same signature, new values and inputs every call, given as a KSFactor, a KSChain and a
    list: each result matches its own reference (nothing stale from the first call)."""
    from kronlinalg.vendor import cublas

    dtype = kernel_dtype(xp)
    patterns = [(2, 3, 4, 3), (1, 4, 6, 6)]
    if algorithm == "strided":
        if not (xp.is_cuda and cublas.available()):
            pytest.skip("the strided algorithm runs cuBLAS on CUDA arrays")
        if layout == "batch_first":  # batch_first needs d = 1
            patterns = [(2, 3, 4, 1), (1, 8, 6, 1)]
    for rep in range(3):
        chain = make_chain(xp, rng, patterns, dtype)
        x, x64 = x_for(xp, rng, chain, layout, 9, dtype)
        for factors in (chain, list(chain), tuple(chain)):
            y = structured_matmul(x, factors, layout=layout, algorithm=algorithm)
            assert_close(y, reference(x64, chain, layout), xp, dtype, msg=f"call {rep}: ")
        one = KSChain([chain[1]])
        x1, x164 = x_for(xp, rng, one, layout, 5, dtype)
        y = structured_matmul(x1, chain[1], layout=layout, algorithm=algorithm)
        assert_close(y, reference(x164, one, layout), xp, dtype, msg=f"single {rep}: ")
    with pytest.raises(ValueError, match="x"):  # same factors, a wrong x: still validated
        bad = x[..., :-1] if layout == "batch_first" else x[:-1, ...]
        structured_matmul(bad, chain, layout=layout, algorithm=algorithm)
    with pytest.raises((TypeError, ValueError)):  # an unhashable option: the full path's error
        structured_matmul(x, chain, layout=[layout], algorithm=algorithm)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_numpy_repeats_replay_only_the_same_call(rng, layout):
    """NumPy calls take the per-signature fast path (the CPU kernel's replay; on a CUDA build
    also the compiled front's memo of the last call): each call is made three times (the full
    path, the replay found by its key, the remembered call), and a call that differs from the
    one before only in x's strides, x's dtype, the values' strides, the values themselves or
    the form of the factors argument gets its own answer, never the previous call's."""
    patterns = [(2, 3, 4, 3), (1, 4, 6, 6)]
    chain = KSChain([KSFactor(p, rng.standard_normal(p).astype(np.float32)) for p in patterns])
    n = chain.shape[1]
    shape = (9, n) if layout == "batch_first" else (n, 9)
    x = rng.standard_normal(shape).astype(np.float32)
    wide = rng.standard_normal((shape[0], 2 * shape[1])).astype(np.float32)
    strided_values = KSChain([KSFactor(f.pattern, np.repeat(f.values, 2, axis=-1)[..., ::2])
                              for f in chain])
    fresh = KSChain([KSFactor(f.pattern, rng.standard_normal(f.pattern).astype(np.float32))
                     for f in chain])
    cases = [("base", x, chain), ("x strided", wide[:, ::2], chain),
             ("x Fortran order", np.asfortranarray(x), chain),
             ("x float64", x.astype(np.float64), chain), ("values strided", x, strided_values),
             ("new values", x, fresh), ("a list", x, list(fresh)), ("base again", x, chain),
             ("one factor", x[..., : chain[1].shape[1]] if layout == "batch_first"
              else x[: chain[1].shape[1]], chain[1])]
    for name, xc, factors in cases:
        one = KSChain([factors]) if isinstance(factors, KSFactor) else KSChain(list(factors))
        want = reference(xc.astype(np.float64), one, layout)
        for call in range(3):
            got = structured_matmul(xc, factors, layout=layout)
            assert got.dtype == xc.dtype, name
            tol = 1e-12 if xc.dtype == np.float64 else 2e-5
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(),
                                       err_msg=f"{name}, call {call}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_cuda_natural_tiles(rng, monkeypatch, dtype):
    """The natural-layout kernel (ks_cuda_natural.cuh: batch_first half types, d = 2, 3, X and
    K copied as they lie, fragments picked out of each lane's (l, j) run), forced on beyond the
    sizes it is taken for, against a float64 reference: tails in the batch, in b (several k tiles, a
    partial one) and in c (c % 16 == 8: a half k16 step; more l chunks than stages), a > 1,
    y rows off the 16-byte grid (scalar stores), padding columns of y left untouched."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")

    monkeypatch.setenv("KRONLINALG_KS_NATURAL", "1")
    for pattern, batch, pad in [((1, 72, 200, 2), 257, 8), ((3, 130, 24, 2), 65, 0),
                                ((1, 136, 40, 3), 129, 1), ((2, 24, 8, 3), 70, 8),
                                ((1, 200, 264, 3), 300, 0), ((1, 9, 8, 2), 1, 0)]:
        err = _half_batch_first_error(rng, pattern, batch, pad, dtype)
        assert err < RTOL[dtype], (pattern, dtype, err)
