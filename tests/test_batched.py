"""batched_matmul and matmul: float64 references, every backend, dtype and layout, bad input,
variable sizes, properties, and matmul against numpy.matmul's semantics."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kronlinalg
from kronlinalg import batched_matmul, matmul
from _helpers import assert_close, random, to_numpy, to_xp

# float16 / bfloat16: the output's own rounding plus float32 accumulation over k terms
UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24,
        "float64": 2.0 ** -53}
# half the spacing of the type's subnormals: a result rounded into them is off by up to this
# much absolutely, whatever its size (float16's start below 6.1e-5)
TINY = {"float16": 2.0 ** -25, "bfloat16": 2.0 ** -134}
ORDERS = (1, 2, 3, 5, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257)


def _ref(a, b, alpha=1.0, beta=0.0, c=None):
    out = alpha * np.matmul(a, b)
    if beta != 0.0:
        out = out + beta * c
    return out


def _check(out, ref, xp, dtype, a, b, alpha=1.0, msg="", library=False, c_term=0.0):
    """Elementwise bound for half types (the issue's: output rounding + k·2⁻²⁴ relative to
    |alpha|·|a|@|b|, plus the float32 epilogue's rounding of alpha·acc + beta·c and the
    subnormal floor; library: the array library's matmul, which rounds a@b to the half type
    before the alpha/beta epilogue, one rounding of |alpha|·|a|@|b| more), relative Frobenius
    error otherwise (3xTF32 float32 within 2x IEEE's)."""
    if dtype in ("float16", "bfloat16"):
        got = to_numpy(out).astype(np.float64)
        assert got.shape == ref.shape, msg
        k = a.shape[-1]
        mag = abs(alpha) * np.matmul(np.abs(a), np.abs(b))
        bound = ((UNIT[dtype] + 2.0 ** -24) * np.abs(ref) + (k + 2) * 2.0 ** -24 * mag
                 + TINY[dtype])
        if library:  # (and the epilogue's own roundings: alpha·(a@b), beta·c and their sum)
            bound = bound + UNIT[dtype] * (mag + np.abs(c_term) + np.abs(ref)) + (
                abs(alpha) * TINY[dtype])
        assert np.all(np.abs(got - ref) <= bound), (
            f"{msg}max excess {np.max(np.abs(got - ref) - bound):.3e}")
        return
    rtol = {"float32": 2e-6 * max(1.0, np.sqrt(a.shape[-1]) / 4), "float64": 1e-12}[dtype]
    assert_close(out, ref, xp, dtype, rtol, msg=msg)


def _poison(xp):
    """GPU: fill the caching allocator's free memory with NaN so an unwritten output shows."""
    if not xp.is_cuda:
        return
    junk = xp.module.full((1 << 22,), float("nan"), dtype=xp.module.float32)
    if xp.is_torch:
        junk = junk.to(xp.device)
    del junk


# ---------------------------------------------------------------------------------------------
# stacks


@pytest.mark.parametrize("order", ORDERS)
def test_orders_every_dtype(xp, rng, order):
    for dtype in xp.dtypes:
        m, k, n = order, max(1, order - 1 + order % 3), order + (order % 2)
        a, an = random(xp, rng, (3, m, k), dtype)
        b, bn = random(xp, rng, (3, k, n), dtype)
        _poison(xp)
        out = batched_matmul(a, b)
        _check(out, _ref(an, bn), xp, dtype, an, bn, msg=f"{dtype} {m}x{k}x{n}: ")


@pytest.mark.parametrize("algorithm", ["auto", "library", "blocked", "kami1d", "kami2d"])
def test_algorithms_alpha_beta(xp, rng, algorithm):
    cuda_algo = algorithm.startswith("kami")
    if algorithm == "blocked" and xp.is_cuda or cuda_algo and not xp.is_cuda:
        with pytest.raises(ValueError, match="algorithm"):
            a, _ = random(xp, rng, (2, 3, 3), "float64")
            batched_matmul(a, a, algorithm=algorithm)
        return
    for dtype in xp.dtypes:
        for (m, k, n) in ((7, 5, 9), (16, 16, 16), (33, 20, 40), (70, 64, 65)):
            a, an = random(xp, rng, (4, m, k), dtype)
            b, bn = random(xp, rng, (4, k, n), dtype)
            c, cn = random(xp, rng, (4, m, n), dtype)
            out = batched_matmul(a, b, c=c, alpha=-0.75, beta=1.5, algorithm=algorithm)
            lib = algorithm == "library" or (algorithm == "auto" and xp.is_cuda)
            _check(out, _ref(an, bn, -0.75, 1.5, cn), xp, dtype, an, bn, -0.75,
                   msg=f"{algorithm} {dtype} {m}x{k}x{n}: ", library=lib, c_term=1.5 * cn)
            # beta == 0: c is not read (BLAS convention), even when it holds NaN
            nanc = xp.full((4, m, n), float("nan"), dtype=xp.dtype(dtype), device=xp.device)
            out = batched_matmul(a, b, c=nanc, alpha=2.0, beta=0.0, algorithm=algorithm)
            _check(out, _ref(an, bn, 2.0), xp, dtype, an, bn, 2.0)


def test_broadcasting_and_broadcast_c(xp, rng):
    for dtype in xp.dtypes:
        a, an = random(xp, rng, (4, 1, 6, 5), dtype)
        b, bn = random(xp, rng, (3, 5, 7), dtype)
        c, cn = random(xp, rng, (1, 7), dtype)
        out = batched_matmul(a, b, c=c, beta=0.5)
        _check(out, _ref(an, bn, 1.0, 0.5, cn), xp, dtype, an, bn, library=xp.is_cuda,
               c_term=0.5 * cn)
        b2, bn2 = random(xp, rng, (5, 7), dtype)
        out = batched_matmul(a, b2)
        _check(out, _ref(an, bn2), xp, dtype, an, bn2)
        assert tuple(out.shape) == (4, 1, 6, 7)


def test_transposed_and_strided(xp, rng):
    for dtype in xp.dtypes:
        a, an = random(xp, rng, (5, 9, 33), dtype)
        b, bn = random(xp, rng, (5, 17, 9), dtype)
        # a.mT: 33 x 9 column-major matrices; b[:, ::2, :].mT: strided and transposed (CuPy
        # arrays have no .mT: matrix_transpose, the array API's name)
        at, bt = xp.matrix_transpose(a), xp.matrix_transpose(b[:, ::2, :])
        out = batched_matmul(at, bt)
        _check(out, _ref(np.swapaxes(an, -1, -2), np.swapaxes(bn[:, ::2, :], -1, -2)), xp,
               dtype, np.swapaxes(an, -1, -2), np.swapaxes(bn[:, ::2, :], -1, -2))
        # every other matrix of the stack, every other column of b
        a2, a2n = random(xp, rng, (6, 16, 16), dtype)
        b2, b2n = random(xp, rng, (6, 16, 32), dtype)
        out = batched_matmul(a2[::2, ...], b2[::2, :, ::2])
        _check(out, _ref(a2n[::2], b2n[::2, :, ::2]), xp, dtype, a2n[::2], b2n[::2, :, ::2])


@pytest.mark.parametrize("tiny", ["1", "0"])
def test_dense_small_products(xp, rng, monkeypatch, tiny):
    """Stacks of dense products of orders <= 32 (on CUDA the tiny-product kernel, or with
    KRONLINALG_BATCHED_TINY=0 the tile kernels): products a padded stride apart (every other
    matrix of a stack), two batch dimensions, a B shared by every product, alpha and beta with
    c, orders 1..32 (odd ones too), and the 33 just past the kernel's limit."""
    monkeypatch.setenv("KRONLINALG_BATCHED_TINY", tiny)
    for dtype in xp.dtypes:
        for (m, k, n) in ((16, 16, 16), (32, 32, 32), (1, 1, 1), (5, 3, 7), (17, 9, 31),
                          (32, 32, 1), (24, 8, 8), (33, 32, 32)):
            a, an = random(xp, rng, (2, 3, m, k), dtype)
            b, bn = random(xp, rng, (2, 3, k, n), dtype)
            c, cn = random(xp, rng, (2, 3, m, n), dtype)
            out = batched_matmul(a, b, c=c, alpha=-0.5, beta=2.0, algorithm="auto")
            _check(out, _ref(an, bn, -0.5, 2.0, cn), xp, dtype, an, bn, -0.5,
                   msg=f"{dtype} {m}x{k}x{n}: ", library=xp.is_cuda, c_term=2.0 * cn)
            for algo in (("kami1d",) if xp.is_cuda else ("auto",)):
                out = batched_matmul(a[:, ::2, ...], b[:, ::2, ...], algorithm=algo)
                _check(out, _ref(an[:, ::2], bn[:, ::2]), xp, dtype, an[:, ::2], bn[:, ::2],
                       msg=f"{algo} strided {dtype} {m}x{k}x{n}: ")
                out = batched_matmul(a, b[0, 0, ...], alpha=3.0, algorithm=algo)
                _check(out, _ref(an, bn[0, 0], 3.0), xp, dtype, an, bn[0, 0], 3.0,
                       msg=f"{algo} shared b {dtype} {m}x{k}x{n}: ")


@pytest.mark.parametrize("thin", ["1", "0"])
def test_low_rank_products(xp, rng, monkeypatch, thin):
    """Stacks of products with a short k (low rank: on CUDA the thin-product kernel for the half
    types and float32, or with KRONLINALG_BATCHED_THIN=0 the tile kernels): k of whole and
    partial MMA steps, orders that leave partial 64 x 128 tiles, alpha and beta with c, every
    other matrix of a stack, a shared b, and sizes just outside the kernel (k = 33, odd n)."""
    monkeypatch.setenv("KRONLINALG_BATCHED_THIN", thin)
    for dtype in xp.dtypes:
        for (m, k, n) in ((128, 16, 128), (128, 32, 128), (200, 8, 136), (71, 24, 264),
                          (33, 16, 72), (64, 12, 64), (136, 8, 200), (96, 33, 96),
                          (96, 16, 97)):
            a, an = random(xp, rng, (3, m, k), dtype)
            b, bn = random(xp, rng, (3, k, n), dtype)
            c, cn = random(xp, rng, (3, m, n), dtype)
            out = batched_matmul(a, b, c=c, alpha=-0.5, beta=2.0, algorithm="auto")
            _check(out, _ref(an, bn, -0.5, 2.0, cn), xp, dtype, an, bn, -0.5,
                   msg=f"{dtype} {m}x{k}x{n}: ", library=xp.is_cuda, c_term=2.0 * cn)
            for algo in (("kami1d",) if xp.is_cuda else ("auto",)):
                out = batched_matmul(a[::2, ...], b[::2, ...], algorithm=algo)
                _check(out, _ref(an[::2], bn[::2]), xp, dtype, an[::2], bn[::2],
                       msg=f"{algo} strided {dtype} {m}x{k}x{n}: ")
                out = batched_matmul(a, b[1, ...], alpha=3.0, algorithm=algo)
                _check(out, _ref(an, bn[1], 3.0), xp, dtype, an, bn[1], 3.0,
                       msg=f"{algo} shared b {dtype} {m}x{k}x{n}: ")


def test_layouts_from_strategies(xp, rng):
    strategies = pytest.importorskip("strategies")
    vals_a = strategies.random_values(rng, (3, 12, 10))
    vals_b = strategies.random_values(rng, (3, 10, 11))
    for layout in strategies.layouts_for(xp):
        if layout.startswith("bytes") and xp.is_cuda:
            # kernel_ready copies such views with cupy.ascontiguousarray, whose kernel reads
            # float64 at 4-byte alignment: cudaErrorMisalignedAddress, which poisons the context
            # for every later test (seen on H100 by the strassen tests, and by this one)
            continue
        a = strategies.layout_view(xp, vals_a, layout)
        b = strategies.layout_view(xp, vals_b, layout)
        out = batched_matmul(a, b)
        assert_close(out, vals_a @ vals_b, xp, "float64", 1e-12, msg=f"{layout}: ")


def test_empty_batches(xp, rng):
    for dtype in xp.dtypes:
        a, _ = random(xp, rng, (0, 4, 3), dtype)
        b, _ = random(xp, rng, (0, 3, 5), dtype)
        out = batched_matmul(a, b)
        assert tuple(out.shape) == (0, 4, 5)
        a, _ = random(xp, rng, (2, 0, 3), dtype)
        b, _ = random(xp, rng, (2, 3, 5), dtype)
        assert tuple(batched_matmul(a, b).shape) == (2, 0, 5)
        # k == 0: the product term is zero; beta * c remains
        a, an = random(xp, rng, (2, 4, 0), dtype)
        b, bn = random(xp, rng, (2, 0, 5), dtype)
        c, cn = random(xp, rng, (2, 4, 5), dtype)
        out = batched_matmul(a, b, c=c, beta=2.0)
        np.testing.assert_allclose(to_numpy(out).astype(np.float64), 2.0 * cn, rtol=1e-2)


def test_inputs_not_modified(xp, rng):
    a, an = random(xp, rng, (3, 8, 8), "float64")
    b, bn = random(xp, rng, (3, 8, 8), "float64")
    c, cn = random(xp, rng, (3, 8, 8), "float64")
    batched_matmul(a, b, c=c, beta=1.0, alpha=3.0)
    for v, vn in ((a, an), (b, bn), (c, cn)):
        np.testing.assert_array_equal(to_numpy(v), vn)


# ---------------------------------------------------------------------------------------------
# variable sizes


def _var_sizes(rng, count, top=40):
    sizes = [tuple(int(v) for v in rng.integers(1, top, 3)) for _ in range(count)]
    sizes[1] = (0, 5, 3)  # empty products among the others
    sizes[2] = (4, 6, 0)
    sizes[3] = (3, 0, 2)
    return sizes


def test_variable_list(xp, rng):
    for dtype in xp.dtypes:
        sizes = _var_sizes(rng, 12)
        sizes[4] = (65, 70, 129)  # tiles past one block
        pairs = [(random(xp, rng, (m, k), dtype), random(xp, rng, (k, n), dtype))
                 for m, n, k in sizes]
        cs = [random(xp, rng, (m, n), dtype) for m, n, _ in sizes]
        outs = batched_matmul([p[0][0] for p in pairs], [p[1][0] for p in pairs],
                              c=[c[0] for c in cs], alpha=0.5, beta=-1.0)
        assert isinstance(outs, list) and len(outs) == len(sizes)
        for (pa, pb), (_, cn), out in zip(pairs, cs, outs):
            ref = _ref(pa[1], pb[1], 0.5, -1.0, cn)
            assert tuple(out.shape) == ref.shape
            if ref.size:
                _check(out, ref, xp, dtype, pa[1], pb[1], 0.5)
    assert batched_matmul([], []) == []


def test_variable_packed(xp, rng):
    for dtype in xp.dtypes:
        sizes = _var_sizes(rng, 10)
        m, n, k = (np.array(v) for v in zip(*sizes))
        a, an = random(xp, rng, (int((m * k).sum()),), dtype)
        b, bn = random(xp, rng, (int((k * n).sum()),), dtype)
        table = np.array(sizes, dtype=np.int64)
        for where in ("host", "device"):
            tab = table if where == "host" or not xp.is_cuda else to_xp(xp, table)
            if where == "device" and not xp.is_cuda:
                tab = to_xp(xp, table)
            out = batched_matmul(a, b, sizes=tab, alpha=2.0)
            got = to_numpy(out).astype(np.float64)
            ao = bo = do = 0
            for mm, nn, kk in sizes:
                ref = 2.0 * an[ao:ao + mm * kk].reshape(mm, kk) @ bn[bo:bo + kk * nn].reshape(kk, nn)
                if ref.size:
                    tol = 1e-10 if dtype == "float64" else 3e-2 if dtype in ("float16", "bfloat16") else 1e-4
                    np.testing.assert_allclose(got[do:do + mm * nn].reshape(mm, nn), ref,
                                               rtol=tol, atol=tol * max(1, np.abs(ref).max()))
                ao, bo, do = ao + mm * kk, bo + kk * nn, do + mm * nn
            assert got.shape == (do,)


def _packed_call(xp, rng, sizes, dtype, alpha, beta):
    """batched_matmul on fresh packed products of `sizes` ((m, n, k) each; the size table where
    the arrays are), alpha and beta, outputs poisoned: the result on the host as float64, and
    the operands' host copies an, bn, cn."""
    m, n, k = (np.array(v) for v in zip(*sizes))
    a, an = random(xp, rng, (int((m * k).sum()),), dtype)
    b, bn = random(xp, rng, (int((k * n).sum()),), dtype)
    c, cn = random(xp, rng, (int((m * n).sum()),), dtype)
    _poison(xp)
    out = batched_matmul(a, b, c=c, alpha=alpha, beta=beta,
                         sizes=to_xp(xp, np.array(sizes, dtype=np.int64)),
                         out_size=int((m * n).sum()))
    return to_numpy(out).astype(np.float64), an, bn, cn


def test_variable_packed_many(xp, rng):
    """Enough packed products that every group of the GPU kernel claims several (empty ones
    among them: a k = 0 product once sent the next product's first panel into the buffer its
    epilogue then staged C in), odd orders up to 80 (rows at every alignment: the staging
    path), the table on the device where the arrays are, outputs poisoned, alpha and beta."""
    count = 1500
    sizes = [tuple(int(v) for v in rng.integers(1, 81, 3)) for _ in range(count)]
    for i in range(0, count, 7):
        sizes[i] = (sizes[i][0], sizes[i][1], 0)
    for i in range(3, count, 11):
        sizes[i] = (0, sizes[i][1], sizes[i][2])
    for dtype in xp.dtypes:
        got, an, bn, cn = _packed_call(xp, rng, sizes, dtype, 1.5, -0.5)
        tol = 1e-10 if dtype == "float64" else 3e-2 if dtype in ("float16", "bfloat16") else 1e-4
        ao = bo = do = 0
        for mm, nn, kk in sizes:
            ref = (1.5 * an[ao:ao + mm * kk].reshape(mm, kk) @ bn[bo:bo + kk * nn].reshape(kk, nn)
                   - 0.5 * cn[do:do + mm * nn].reshape(mm, nn))
            if ref.size:
                np.testing.assert_allclose(got[do:do + mm * nn].reshape(mm, nn), ref, rtol=tol,
                                           atol=tol * max(1, np.abs(ref).max()),
                                           err_msg=f"{dtype} product {(mm, nn, kk)}")
            ao, bo, do = ao + mm * kk, bo + kk * nn, do + mm * nn


def test_variable_device_table_bounds(xp, rng):
    """A size table on the GPU is never read on the host (no synchronisation), so its rows are
    checked where the kernels' table is built (batched_cuda_table.cu): a row whose A or B leaves
    its buffer is an empty product (beta C here), one whose output or C leaves its buffer is not
    computed, and every other row computes as usual.  The packed form (offsets by running sums,
    over more rows than one block of the table kernel takes: 2,500) and explicit offsets (a
    negative one among them)."""
    if not xp.is_cuda:
        pytest.skip("a size table on the GPU")
    count = 2500
    sizes = rng.integers(1, 7, (count, 3)).astype(np.int64)
    m, n, k = sizes[:, 0], sizes[:, 1], sizes[:, 2]
    ao, bo, do = (np.concatenate(([0], np.cumsum(x)[:-1])) for x in (m * k, k * n, m * n))
    a_len = int(ao[-40] + m[-40] * k[-40]) - 1  # the last 40 rows' A leave a
    out_len = int(do[-10])                      # the last 10 rows' outputs leave the output
    for dtype in xp.dtypes:
        a, an = random(xp, rng, (a_len,), dtype)
        b, bn = random(xp, rng, (int((k * n).sum()),), dtype)
        c, cn = random(xp, rng, (out_len,), dtype)
        out = to_numpy(batched_matmul(a, b, c=c, alpha=2.0, beta=0.5, sizes=to_xp(xp, sizes),
                                      out_size=out_len)).astype(np.float64)
        tol = 1e-10 if dtype == "float64" else 3e-2 if dtype in ("float16", "bfloat16") else 1e-4
        for i in range(count - 10):
            mm, nn, kk = (int(v) for v in sizes[i])
            pc = cn[do[i]:do[i] + mm * nn].reshape(mm, nn)
            if ao[i] + mm * kk > a_len:
                ref = 0.5 * pc
            else:
                ref = 2.0 * (an[ao[i]:ao[i] + mm * kk].reshape(mm, kk)
                             @ bn[bo[i]:bo[i] + kk * nn].reshape(kk, nn)) + 0.5 * pc
            np.testing.assert_allclose(out[do[i]:do[i] + mm * nn].reshape(mm, nn), ref,
                                       rtol=tol, atol=tol * 4, err_msg=f"{dtype} row {i}")
    a, an = random(xp, rng, (200,), "float32")
    b, bn = random(xp, rng, (200,), "float32")
    table = np.array([[3, 4, 5, 10, 0, 2], [2, 2, 2, -1, 100, 14], [2, 2, 2, 0, 100, 39],
                      [2, 2, 2, 0, 199, 20], [2, 2, 2, 4, 8, 30]], dtype=np.int64)
    out = to_numpy(batched_matmul(a, b, sizes=to_xp(xp, table), out_size=40))
    # (3xTF32: an error ~1e-6 of the terms' size, so a sum that cancels to 5e-4 is ~1e-5 off
    # relatively -- seed 1102050884 -- hence the absolute part)
    np.testing.assert_allclose(out[2:14].reshape(3, 4),
                               an[10:25].reshape(3, 5) @ bn[0:20].reshape(5, 4), rtol=1e-5,
                               atol=1e-5)
    assert np.all(out[14:18] == 0) and np.all(out[20:24] == 0)  # A, then B outside: zeros
    np.testing.assert_allclose(out[30:34].reshape(2, 2),
                               an[4:8].reshape(2, 2) @ bn[8:12].reshape(2, 2), rtol=1e-5,
                               atol=1e-5)
    assert np.all(out[:2] == 0) and np.all(out[34:] == 0)  # gaps (and row 3's output: outside)


@pytest.mark.parametrize("large", ["96", "0", "40", "96-synchronous", "96-wgmma", "40-wgmma"])
def test_variable_packed_large_orders(xp, rng, monkeypatch, large):
    """Packed products of orders 1..300 (odd ones: rows at every alignment), every dtype split
    on the GPU between the 128 x 128 kernel and the small-tile one by KRONLINALG_BATCHED_LARGE
    (96: the default; 0: the small-tile kernel alone; 40: 128 x 128 tiles from order 40, the
    32 x 32 kernel below); empty and k = 0 products, products past the packed form's max order
    256 (the last row item takes the rest), alpha and beta, outputs poisoned; and uniform
    stacks of orders around the switch.  96-synchronous: unaligned rows loaded synchronously
    (KRONLINALG_BATCHED_STAGING=0), not staged in place (the default).  -wgmma: the half types'
    128 x 128 tiles on the warpgroup-MMA kernel (KRONLINALG_BATCHED_WGMMA=2: variable batches
    too, rows at any offset loaded element by element; an H100 build with sm_90a)."""
    monkeypatch.setenv("KRONLINALG_BATCHED_LARGE", large.split("-")[0])
    if large.endswith("-synchronous"):
        monkeypatch.setenv("KRONLINALG_BATCHED_STAGING", "0")
    if large.endswith("-wgmma"):
        monkeypatch.setenv("KRONLINALG_BATCHED_WGMMA", "2")
    count = 48 if xp.is_cuda else 16
    sizes = [tuple(int(v) for v in rng.integers(1, 301, 3)) for _ in range(count)]
    sizes[0], sizes[1], sizes[2] = (97, 0, 40), (130, 140, 0), (257, 300, 129)
    for dtype in xp.dtypes:
        got, an, bn, cn = _packed_call(xp, rng, sizes, dtype, -1.5, 0.5)
        ao = bo = do = 0
        for mm, nn, kk in sizes:
            pa = an[ao:ao + mm * kk].reshape(mm, kk)
            pb = bn[bo:bo + kk * nn].reshape(kk, nn)
            pc = cn[do:do + mm * nn].reshape(mm, nn)
            ref = _ref(pa, pb, -1.5, 0.5, pc)
            piece = got[do:do + mm * nn].reshape(mm, nn)
            if mm * nn and dtype in ("float16", "bfloat16"):
                _check(piece, ref, xp, dtype, pa, pb, -1.5, msg=f"{dtype} product {(mm, nn, kk)}: ")
            elif mm * nn:  # relative Frobenius error, as _check's
                rtol = {"float32": 2e-6 * max(1.0, np.sqrt(kk) / 4), "float64": 1e-12}[dtype]
                err = np.linalg.norm(piece - ref) / max(np.linalg.norm(ref), 1e-300)
                assert err <= rtol, f"{dtype} product {(mm, nn, kk)}: relative error {err:.2e}"
            ao, bo, do = ao + mm * kk, bo + kk * nn, do + mm * nn
        for order in (48, 65, 95, 96, 129, 200):  # (48-95: the 64 x 64 tiles of the kernel)
            sa, san = random(xp, rng, (3, order, order + 3), dtype)
            sb, sbn = random(xp, rng, (3, order + 3, order - 1), dtype)
            _poison(xp)
            _check(batched_matmul(sa, sb), _ref(san, sbn), xp, dtype, san, sbn,
                   msg=f"{dtype} stack of order {order}: ")


@pytest.mark.parametrize("level", ["0", "1", "3"])
def test_half_stacks_on_each_kernel(xp, rng, monkeypatch, level):
    """Uniform half-type stacks whose rows are 16-byte aligned, on the 128 x 128 mma.sync kernel
    (KRONLINALG_BATCHED_WGMMA=0), the warpgroup-MMA kernel where the build and GPU have it (1,
    the default; 3: for the 64 x 64 tiles' orders too): orders around the tile edges, low rank,
    k not a multiple of the 64-wide k-panel, alpha, beta with a row-broadcast C, a batch
    dimension broadcast, outputs poisoned."""
    monkeypatch.setenv("KRONLINALG_BATCHED_WGMMA", level)
    for dtype in [d for d in xp.dtypes if d in ("float16", "bfloat16")]:
        for m, k, n in ((128, 128, 128), (96, 200, 136), (256, 16, 128), (8, 40, 256),
                        (200, 72, 64), (64, 64, 64), (48, 8, 56), (264, 24, 136)):
            a, an = random(xp, rng, (2, 3, m, k), dtype)
            b, bn = random(xp, rng, (1, 3, k, n), dtype)
            c, cn = random(xp, rng, (n,), dtype)
            _poison(xp)
            out = batched_matmul(a, b, c=c, alpha=-1.5, beta=0.5,
                                 algorithm="kami1d" if xp.is_cuda else "auto")
            _check(out, _ref(an, bn, -1.5, 0.5, cn), xp, dtype, an, bn, -1.5,
                   msg=f"{dtype} {m}x{k}x{n}, level {level}: ")


def test_variable_packed_offsets(xp, rng):
    a, an = random(xp, rng, (200,), "float64")
    b, bn = random(xp, rng, (200,), "float64")
    table = np.array([[3, 4, 5, 10, 0, 2], [2, 2, 2, 0, 100, 30]], dtype=np.int64)
    out = batched_matmul(a, b, sizes=table, out_size=40)
    got = to_numpy(out)
    np.testing.assert_allclose(got[2:14].reshape(3, 4),
                               an[10:25].reshape(3, 5) @ bn[0:20].reshape(5, 4), rtol=1e-12)
    np.testing.assert_allclose(got[30:34].reshape(2, 2),
                               an[0:4].reshape(2, 2) @ bn[100:104].reshape(2, 2), rtol=1e-12)
    assert np.all(got[:2] == 0) and np.all(got[14:30] == 0)  # gaps read as zero
    with pytest.raises(ValueError, match="^a: "):
        batched_matmul(a, b, sizes=np.array([[20, 20, 20]]))
    with pytest.raises(ValueError, match="^out_size: "):
        batched_matmul(a, b, sizes=table, out_size=10)
    with pytest.raises(ValueError, match="^sizes: "):
        batched_matmul(a, b, sizes=np.array([[2, 2]]))
    with pytest.raises(TypeError, match="^sizes: "):
        batched_matmul(a, b, sizes=np.array([[2.0, 2.0, 2.0]]))


# ---------------------------------------------------------------------------------------------
# bad input: errors name the argument


def test_bad_input(xp, rng):
    a, _ = random(xp, rng, (2, 3, 4), "float64")
    b, _ = random(xp, rng, (2, 5, 6), "float64")
    with pytest.raises(ValueError, match="^b: "):
        batched_matmul(a, b)
    with pytest.raises(ValueError, match="^a: "):
        batched_matmul(a[0, 0, ...], a)
    at = xp.matrix_transpose(a)
    with pytest.raises(ValueError, match="^c: "):
        batched_matmul(a, at, beta=1.0)
    with pytest.raises(ValueError, match="^c: "):
        batched_matmul(a, at, c=a, beta=1.0)
    with pytest.raises(TypeError, match="^alpha: "):
        batched_matmul(a, at, alpha="2")
    with pytest.raises(ValueError, match="^algorithm: "):
        batched_matmul(a, at, algorithm="fastest")
    ints = to_xp(xp, np.ones((2, 3, 3), dtype=np.int32))
    with pytest.raises(TypeError, match="^a: "):
        batched_matmul(ints, at)
    with pytest.raises(ValueError, match="^b"):
        batched_matmul([a[0, ...]], [a[0, ...], a[1, ...]])
    with pytest.raises(ValueError, match=r"^b\[0\]: "):
        batched_matmul([a[0, ...]], [a[0, ...]])
    with pytest.raises(TypeError, match="^b: "):
        batched_matmul([a[0, ...]], a)
    bb, _ = random(xp, rng, (3, 4, 6), "float64")
    with pytest.raises(ValueError, match="^b: "):
        batched_matmul(a, bb)


# ---------------------------------------------------------------------------------------------
# properties


def test_property_stacks():
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies

    @hyp.given(st.integers(0, 3), st.integers(0, 3), st.integers(0, 40), st.integers(0, 40),
               st.integers(0, 40), st.floats(-2, 2), st.floats(-2, 2), st.integers(0, 2**31),
               st.booleans(), st.booleans())
    def check(ba, bb, m, k, n, alpha, beta, seed, ta, tb):
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((ba, 1, k, m) if ta else (ba, 1, m, k))
        b = rng.standard_normal((bb, n, k) if tb else (bb, k, n))
        a, b = (np.swapaxes(a, -1, -2) if ta else a), (np.swapaxes(b, -1, -2) if tb else b)
        c = rng.standard_normal((1, n))
        out = batched_matmul(a, b, c=c, alpha=alpha, beta=beta)
        ref = alpha * np.matmul(a, b) + beta * c
        assert out.shape == ref.shape
        np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10 * max(1, k))

    check()


def test_property_variable_list():
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies

    @hyp.given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20)),
                        max_size=8), st.integers(0, 2**31))
    def check(sizes, seed):
        rng = np.random.default_rng(seed)
        a = [rng.standard_normal((m, k)) for m, n, k in sizes]
        b = [rng.standard_normal((k, n)) for m, n, k in sizes]
        outs = batched_matmul(a, b)
        for x, y, o in zip(a, b, outs):
            np.testing.assert_allclose(o, x @ y, rtol=1e-10, atol=1e-10)

    check()


# ---------------------------------------------------------------------------------------------
# matmul: numpy.matmul's semantics, routed


_SHAPES = [(3,), (1, 3), (4, 3), (2, 4, 3), (1, 4, 3), (2, 1, 4, 3), (0, 4, 3), (4, 0)]


def test_matmul_semantics_exhaustive(rng):
    """Every pair of a small shape set: the same result, shape, dtype and error class as
    numpy.matmul (ValueError for shapes that do not match)."""
    shapes_b = [(3,), (3, 5), (3, 1), (2, 3, 5), (1, 3, 5), (3, 3, 5), (2, 1, 3, 5), (0, 3, 5),
                (0,), (3, 0)]
    for sa, sb in itertools.product(_SHAPES, shapes_b):
        for dt in ("float64", "float32", "int64"):
            a = (rng.standard_normal(sa) * 4).astype(dt)
            b = (rng.standard_normal(sb) * 4).astype(dt)
            try:
                ref = np.matmul(a, b)
            except ValueError:
                with pytest.raises(ValueError):
                    matmul(a, b)
                continue
            out = matmul(a, b)
            assert out.shape == ref.shape and out.dtype == ref.dtype, (sa, sb, dt)
            # (another summation order than NumPy's: an error relative to |a| @ |b|, not to a
            # result that cancels)
            scale = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
            tol = 1e-5 if dt == "float32" else 1e-12
            np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * float(np.max(scale,
                                                                                   initial=0)))


def test_matmul_backends(xp, rng):
    for dtype in xp.dtypes:
        for sa, sb in (((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((7, 8, 8), (7, 8, 8)),
                       ((300, 16, 16), (16, 16)), ((2, 1, 6, 5), (3, 5, 4))):
            a, an = random(xp, rng, sa, dtype)
            b, bn = random(xp, rng, sb, dtype)
            out = matmul(a, b)
            ref = np.matmul(an, bn)
            if dtype in ("float16", "bfloat16"):
                np.testing.assert_allclose(to_numpy(out).astype(np.float64), ref, rtol=3e-2,
                                           atol=3e-2 * np.sqrt(sa[-1]))
            else:
                assert_close(out, ref, xp, dtype, 1e-5 if dtype == "float32" else 1e-12)
    with pytest.raises(ValueError, match="^a: "):
        matmul(xp.reshape(to_xp(xp, np.ones(1)), ()), to_xp(xp, np.ones(3)))


def test_matmul_routing_margin():
    """The planner routes matmul to batched_matmul only where it predicts a gain beyond 5 %;
    never beyond order 256, never for one matrix."""
    for shapes in (((10000, 16, 16), (10000, 16, 16)), ((64, 32, 32), (64, 32, 32))):
        plan = kronlinalg.plan("matmul", *shapes, dtype="float32", device="h100-sxm")
        best = plan[0]
        lib = next(ch for ch in plan if ch.name == "library")
        if best.name == "batched":
            assert best.seconds * 1.0 <= lib.seconds
            assert best.details["margin"] == pytest.approx(1.05)
    plan = kronlinalg.plan("matmul", (4, 512, 512), (4, 512, 512), dtype="float64",
                           device="h100-sxm")
    assert [ch.name for ch in plan] == ["library"]
    plan = kronlinalg.plan("matmul", (16, 16), (16, 16), dtype="float64", device="cpu")
    assert [ch.name for ch in plan] == ["library"]


def test_plan_held_out_grid_picks():
    """Three picks of the H100 held-out grid of session 12 (device time measured in warm loops,
    µs): float16 order 72 at batch 10³ (ours 54, torch.bmm 18: the 64 x 64 tiles run the padded
    product), float16 order 10 at batch 10⁵ (ours 219, torch.bmm 86: 20-byte rows), and float16
    order 96 at batch 100 (ours 12.6, torch.bmm 17.7: one panel's pipeline fill)."""
    def pick(n, batch):
        s = (batch, n, n)
        return kronlinalg.plan("batched_matmul", s, s, dtype="float16", device="h100-sxm",
                               dense=True)[0].name

    assert pick(72, 1000) == "library"
    assert pick(10, 100_000) == "library"
    assert pick(96, 100) == "kami1d"


def test_plan_thin_kernel():
    """Dense low-rank stacks of the half types and float32 are priced as the thin-product
    kernel (its measured bandwidth fraction, no tile tail); float64, k beyond 32, float32 of
    order 64 with k = 32 and strided stacks (dense not claimed) are not."""
    def kami1d(dtype, k, **opts):
        plan = kronlinalg.plan("batched_matmul", (10000, 128, k), (10000, k, 128), dtype=dtype,
                               device="h100-sxm", **opts)
        return next(ch for ch in plan if ch.name == "kami1d").details

    for dtype in ("float16", "bfloat16", "float32"):
        for k in (16, 32):
            d = kami1d(dtype, k, dense=True)
            assert d["tile"] == "tiny (thin)" and d["block_cycles"] == 0.0
    assert kami1d("float64", 16, dense=True)["tile"] != "tiny (thin)"
    # (float32 below order 128 only with k <= 16)
    plan = kronlinalg.plan("batched_matmul", (10000, 64, 32), (10000, 32, 64), dtype="float32",
                           device="h100-sxm", dense=True)
    assert next(ch for ch in plan if ch.name == "kami1d").details["tile"] != "tiny (thin)"
    plan = kronlinalg.plan("batched_matmul", (10000, 64, 16), (10000, 16, 64), dtype="float32",
                           device="h100-sxm", dense=True)
    assert next(ch for ch in plan if ch.name == "kami1d").details["tile"] == "tiny (thin)"
    assert kami1d("float16", 40, dense=True)["tile"] != "tiny (thin)"
    assert kami1d("float16", 16)["tile"] != "tiny (thin)"


def test_plan_and_explain():
    plan = kronlinalg.plan("batched_matmul", (10000, 16, 16), (10000, 16, 16),
                           dtype="float64", device="h100-sxm")
    names = {ch.name for ch in plan}
    assert {"library", "kami1d", "kami2d"} <= names
    k1 = next(ch for ch in plan if ch.name == "kami1d")
    assert k1.details["tile"] == "16x16" and k1.details["per_block"] == 4
    assert k1.details["mma"] == "dmma-m8n8k4"
    text = kronlinalg.explain("batched_matmul", (1000, 3), dtype="float16",
                              device="h100-sxm", max_order=256, file=None)
    assert "kami1d" in text
    cpu = kronlinalg.plan("batched_matmul", (5000, 8, 8), (5000, 8, 8), dtype="float64")
    assert cpu[0].name == "blocked"


# ---------------------------------------------------------------------------------------------
# the CUDA kernels' indexing, on the CPU


def test_cuda_kernels_emulated(tmp_path):
    """kernels/batched/batched_cuda_emulate.cpp runs the CUDA kernels with one thread per CUDA
    thread (warp-collective instructions from the PTX fragment layouts) against float64
    references: every dtype, MMA kind and kernel shape; odd sizes, transposed operands, beta,
    a row-broadcast C, variable sizes with empty products; nothing written past the outputs."""
    import os
    import shutil
    import subprocess

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")
    cuda_inc = next((p for p in ("/usr/local/cuda/include", "/usr/include")
                     if os.path.exists(os.path.join(p, "cuda_fp16.h"))), None)
    if shutil.which("g++") is None or cuda_inc is None:
        pytest.skip("needs g++ and the CUDA headers")
    exe = tmp_path / "batched_emulate"
    src = os.path.join(root, "batched")
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-DKL_BATCHED_EMULATE",
                    f"-I{cuda_inc}", f"-I{src}", f"-I{root}/include", f"-I{root}/common",
                    os.path.join(src, "batched_cuda_emulate.cpp"), "-o", str(exe)], check=True)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "0 failures" in res.stdout
    # the large-tile checks again with the half types on the warpgroup-MMA kernel (wgmma from
    # its PTX definition: descriptors, the 128-byte swizzle, the transposed B operand): level 3
    # takes every uniform stack of aligned rows and every variable product of order >= 96;
    # level 1, the GPU's default, the 128-tile stacks and the variable products of aligned rows,
    # and with KRONLINALG_BATCHED_WG_STAGED the other variable products of order >= 96 on the
    # staged form (rows at 2-byte offsets shifted in shared memory)
    for level, staged in (("3", "0"), ("1", "0"), ("1", "1")):
        env = dict(os.environ, KL_EMULATE_HALF_LARGE_ONLY="1", KRONLINALG_BATCHED_WGMMA=level,
                   KRONLINALG_BATCHED_WG_STAGED=staged)
        res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600, env=env)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        assert "0 failures" in res.stdout


def test_matmul_registration_point():
    """Another algorithm offers itself to matmul through register_matmul_candidate (what the
    Strassen helper's matmul_candidate() needs); it applies only where its predicate says so."""
    from kronlinalg import planner
    from kronlinalg.matmul import MATMUL, register_matmul_candidate

    def run(a, b, /):
        return np.matmul(a, b) * 1.0

    cand = planner.Candidate("probe_candidate", lambda problem, prof: 1e-12,
                             devices=("cpu",), applies=lambda p: bool(p.options.get("probe")),
                             run=run, doc="test probe")
    register_matmul_candidate(cand)
    assert "probe_candidate" in MATMUL.names
    names = [ch.name for ch in kronlinalg.plan("matmul", (8, 8), (8, 8), probe=True)]
    assert names[0] == "probe_candidate"
    assert "probe_candidate" not in [ch.name for ch in kronlinalg.plan("matmul", (8, 8), (8, 8))]
    a = np.arange(64.0).reshape(8, 8)
    with pytest.raises(ValueError, match="^algorithm: "):  # forced where it does not apply
        MATMUL(a, a, algorithm="probe_candidate")
    np.testing.assert_array_equal(MATMUL(a, a, algorithm="library"), a @ a)


def test_fast_path_and_float32_mode(rng):
    from kronlinalg.batched import BATCHED, float32_precision

    a = rng.standard_normal((50, 8, 8))
    b = rng.standard_normal((50, 8, 8))
    first = batched_matmul(a, b, alpha=2.0)
    again = batched_matmul(a, b, alpha=2.0)  # replayed: same signature, no validation
    assert len(BATCHED.cached_signatures()) >= 1
    np.testing.assert_allclose(again, 2.0 * (a @ b), rtol=1e-12)
    np.testing.assert_array_equal(first, again)
    # a different alpha with the same signature still computes with that alpha
    np.testing.assert_allclose(batched_matmul(a, b, alpha=-1.0), -(a @ b), rtol=1e-12)
    prev = float32_precision()
    assert prev in ("tf32x3", "ieee")
    assert float32_precision("ieee") == prev
    assert float32_precision() == "ieee"
    float32_precision(prev)
    with pytest.raises(ValueError, match="^precision: "):
        float32_precision("tf32")


@pytest.mark.parametrize("op", ["batched_matmul", "matmul"])
def test_torch_cpu_fast_path(rng, op):
    """CPU torch tensors take the compiled replay too (the operands by address, the result a
    tensor): repeats with fresh operands, another alpha, a transposed stack (another signature),
    a lazy negated view (same signature: declined, resolved by the full path), an address not
    aligned to the element (declined, copied) and a tensor needing grad (never replayed:
    gradients flow) all give the float64 reference; an earlier result is never written again."""
    torch = pytest.importorskip("torch")
    from kronlinalg.batched import BATCHED
    from kronlinalg.matmul import MATMUL

    cache = {"batched_matmul": BATCHED, "matmul": MATMUL}[op]
    call = {"batched_matmul": batched_matmul, "matmul": lambda a, b, **kw: matmul(a, b)}[op]
    for dtype, order, batch in (("float64", 16, 40), ("float32", 7, 100), ("float64", 33, 3)):
        tdt = getattr(torch, dtype)
        rtol = 1e-12 if dtype == "float64" else 2e-6
        kept = None
        for rep in range(3):
            an = rng.standard_normal((batch, order, order + 1))
            bn = rng.standard_normal((batch, order + 1, order - 1))
            a, b = torch.from_numpy(an).to(tdt), torch.from_numpy(bn).to(tdt)
            out = call(a, b)
            assert type(out) is torch.Tensor and out.dtype == tdt
            ref = np.matmul(a.double().numpy(), b.double().numpy())
            np.testing.assert_allclose(out.double().numpy(), ref, rtol=rtol,
                                       atol=rtol * np.abs(ref).max())
            if rep == 0:
                kept = (out, out.clone())
        torch.testing.assert_close(kept[0], kept[1], rtol=0, atol=0)  # a replay wrote no old result
        if op == "batched_matmul":
            out = batched_matmul(a, b, alpha=-0.5)
            np.testing.assert_allclose(out.double().numpy(), -0.5 * ref, rtol=rtol,
                                       atol=rtol * np.abs(ref).max())
        neg = torch._neg_view(a) if hasattr(torch, "_neg_view") else -a
        np.testing.assert_allclose(call(neg, b).double().numpy(), -ref, rtol=rtol,
                                   atol=rtol * np.abs(ref).max())
        # the same signature at an address not aligned to the element: declined, copied
        raw = np.zeros(a.numel() * a.element_size() + 1, np.uint8)
        un = raw[1:].view(a.numpy().dtype).reshape(tuple(a.shape))
        un[...] = a.numpy()
        np.testing.assert_allclose(call(torch.from_numpy(un), b).double().numpy(), ref,
                                   rtol=rtol, atol=rtol * np.abs(ref).max())
        bt = b.mT.contiguous().mT  # the same values, column-major: another signature
        np.testing.assert_allclose(call(a, bt).double().numpy(), ref, rtol=rtol,
                                   atol=rtol * np.abs(ref).max())
        ag = a.clone().requires_grad_(True)
        out = call(ag, b)
        out.sum().backward()
        np.testing.assert_allclose(ag.grad.double().numpy(),
                                   np.broadcast_to(b.double().numpy().sum(-1)[:, None, :],
                                                   ag.shape), rtol=1e-5, atol=1e-5)
    # the repeats were replays: the fast path holds signatures of CPU tensors
    assert any(isinstance(e, tuple) and e and e[0] is torch.Tensor and e[-1] == -1
               for k in cache.cached_signatures() for e in k)


def test_cpu_model_follows_the_blas_threads(monkeypatch):
    """NumPy's matmul runs a large matrix on as many threads as its BLAS's environment allows
    (OPENBLAS_NUM_THREADS, MKL_NUM_THREADS, then OMP_NUM_THREADS; at most the cores): with one
    BLAS thread the planner takes our kernel at order 160 (0.63-0.78 of NumPy's time on a 2-core
    EPYC), where it used to send every order >= 128 to NumPy."""
    from kronlinalg.common.signatures import changed
    from kronlinalg.planner.profiles import blas_threads

    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    assert blas_threads(4) == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert blas_threads(4) == 3
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert blas_threads(4) == 1
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "many")  # not a count: the next variable
    assert blas_threads(4) == 3
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "64")
    assert blas_threads(4) == 4
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    changed()  # (plans made under other settings are dropped)
    try:
        for dt in ("float32", "float64"):
            pick = kronlinalg.plan("batched_matmul", (2, 160, 160), (2, 160, 160), dtype=dt,
                                   device="cpu")[0].name
            assert pick == "blocked", dt
    finally:
        changed()
