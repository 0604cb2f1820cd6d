"""CP-ALS's one-launch factor update (kernels/tensor/solve_cuda.cu, kronlinalg.tensor.solve)
against float64 NumPy solves, on torch and CuPy arrays: ranks 1 to 64 (a warp's two rows a
lane, part empty), right-hand sides not a multiple of a block's 32, one to eight Gram
matrices, float32 and float64, a singular Hadamard product (the ridge), NaN passing through;
and parafac through it against the library's LU route, eager and as a CUDA graph."""

from __future__ import annotations

import numpy as np
import pytest

from kronlinalg import tensor as T
from kronlinalg.tensor import solve
from kronlinalg.testing import extension
from _helpers import cuda_libs, gpu_array as dev, host_array as host, planted_cp

pytestmark = pytest.mark.gpu

LIBS = cuda_libs()
needs_kernel = pytest.mark.skipif(not LIBS or extension("tensor_cuda") is None,
                                  reason="no CUDA device or a build without CUDA")


def update(grams, rhs):
    assert solve.supported(rhs, int(rhs.shape[0]), len(grams))
    eps = 1e-6 if "float32" in str(rhs.dtype) else 1e-14
    return solve.solve(grams, rhs, eps)


def reference(grams, y, eps):
    v = np.prod(np.stack(grams), axis=0)
    rho = eps * max(float(v.diagonal().max()), 1e-30)
    return np.linalg.solve(v + rho * np.eye(len(v)), y)


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(params=[1, 0], ids=["variant1", "variant0"])
def variant(request):
    """Both factorizations of the kernel (solve.VARIANT), restored after."""
    prev = solve.VARIANT
    solve.VARIANT = request.param
    yield request.param
    solve.VARIANT = prev


@needs_kernel
def _system(seed, rank, n, count, dtype):
    """(grams, y, eps) of one factor update: `count` Gram matrices of 3R-row factors (a
    well-conditioned Hadamard product), right-hand sides (rank, n), the ridge."""
    rng = np.random.default_rng(seed)
    grams = []
    for _ in range(count):
        f = rng.standard_normal((rank, 3 * rank + 4))
        grams.append((f @ f.T / f.shape[1]).astype(dtype))
    y = rng.standard_normal((rank, n)).astype(dtype)
    return grams, y, (1e-6 if dtype == "float32" else 1e-14)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rank,n,count", [(1, 5, 1), (7, 33, 2), (32, 1, 3), (33, 640, 2),
                                          (64, 1000, 8), (64, 31, 1), (50, 97, 4)])
def test_solve_matches_float64(lib, dtype, rank, n, count, variant):
    grams, y, eps = _system(rank * 1000 + n + count, rank, n, count, dtype)
    gd, yd = [dev(lib, g) for g in grams], dev(lib, y)
    before = solve.LAUNCHES
    got = host(lib, update(gd, yd))
    assert solve.LAUNCHES == before + 1, "the kernel did not run"
    assert got.shape == (rank, n) and got.dtype == np.dtype(dtype)
    ref = reference([g.astype(np.float64) for g in grams], y.astype(np.float64), eps)
    assert rel(got.astype(np.float64), ref) < (2e-4 if dtype == "float32" else 1e-11)
    # inputs untouched
    assert np.array_equal(host(lib, yd), y)
    assert all(np.array_equal(host(lib, a), b) for a, b in zip(gd, grams))


@needs_kernel
@pytest.mark.parametrize("lib", LIBS)
def test_solve_singular_product_stays_finite_and_nan_passes(lib, variant):
    rng = np.random.default_rng(7)
    # rank 40 above the factors' 12 rows: V = G1 ∘ G2 singular, the ridge decides
    grams = [rng.standard_normal((40, 12)) for _ in range(2)]
    grams = [f @ f.T for f in grams]
    y = rng.standard_normal((40, 70))
    got = host(lib, update([dev(lib, g) for g in grams], dev(lib, y)))
    assert np.isfinite(got).all()
    # the solution is ill-determined (condition ~1e14): its backward error is what holds
    v = grams[0] * grams[1]
    vr = v + 1e-14 * v.diagonal().max() * np.eye(40)
    resid = np.linalg.norm(vr @ got - y)
    assert resid <= 1e-10 * (np.linalg.norm(vr) * np.linalg.norm(got) + np.linalg.norm(y))
    g32 = [dev(lib, g.astype(np.float32)) for g in grams]
    got32 = host(lib, update(g32, dev(lib, y.astype(np.float32))))
    assert np.isfinite(got32).all()
    bad = grams[0].copy()
    bad[3, 3] = np.nan
    got = host(lib, update([dev(lib, bad), dev(lib, grams[1])], dev(lib, y)))
    assert np.isnan(got).any()


@needs_kernel
def test_parafac_through_the_solve_kernel_matches_the_lu_route(variant):
    torch = pytest.importorskip("torch")
    shape, rank = (40, 37, 30), 6
    x, init = planted_cp(np.random.default_rng(11), shape, rank, 0.05)
    xd = torch.as_tensor(x, device="cuda")
    results = {}
    for route in ("auto", "lu"):
        solve.SOLVER = route
        try:
            for iters in (3, 8):  # eager sweeps, then a CUDA graph
                before = solve.LAUNCHES
                got = T.parafac(xd, rank, init=(None, [torch.as_tensor(f, device="cuda")
                                                       for f in init]),
                                n_iter_max=iters, tol=0)
                took = solve.LAUNCHES - before
                assert (took > 0) == (route == "auto"), (route, iters, took)
                results[route, iters] = T.cp_to_tensor(got).cpu().numpy()
            assert T.cp_als.LAST_RUN["graph"], T.cp_als.LAST_RUN
            assert T.cp_als.LAST_RUN["solve_kernel"] == (route == "auto")
        finally:
            solve.SOLVER = "auto"
    for iters in (3, 8):
        assert rel(results["auto", iters], results["lu", iters]) < 1e-9
    # the given-weights route (the weights' outer product as one more Gram matrix)
    w = np.random.default_rng(11).random(rank) + 0.5
    for route in ("auto", "lu"):
        solve.SOLVER = route
        try:
            got = T.parafac(xd, rank, init=(torch.as_tensor(w, device="cuda"),
                                            [torch.as_tensor(f, device="cuda") for f in init]),
                            n_iter_max=5, tol=0)
            results["w", route] = T.cp_to_tensor(got).cpu().numpy()
        finally:
            solve.SOLVER = "auto"
    assert rel(results["w", "auto"], results["w", "lu"]) < 1e-9


@needs_kernel
def test_parafac_float32_and_cupy_through_the_solve_kernel():
    rng = np.random.default_rng(12)
    shape, rank = (64, 48, 36), 5
    fs = [rng.standard_normal((d, rank)) for d in shape]
    x = np.einsum("ir,jr,kr->ijk", *fs) + 0.01 * rng.standard_normal(shape)
    init = (None, [f + 0.2 * rng.standard_normal(f.shape) for f in fs])
    ref = T.cp_to_tensor(T.parafac(x, rank, init=init, n_iter_max=10, tol=0))
    fit64 = 1 - rel(ref, x)
    for lib in LIBS:
        for precision in ("tf32", "ieee", "float16"):
            before = solve.LAUNCHES
            got = T.parafac(dev(lib, x.astype(np.float32)), rank, n_iter_max=10, tol=0,
                            precision=precision,
                            init=(None, [dev(lib, f.astype(np.float32)) for f in init[1]]))
            assert solve.LAUNCHES > before, (lib, precision)
            fit = 1 - rel(host(lib, T.cp_to_tensor(got)).astype(np.float64), x)
            assert abs(fit - fit64) <= 0.01 * fit64, (lib, precision, fit, fit64)


@needs_kernel
@pytest.mark.parametrize("pipeline", [True, False])
def test_graph_sweeps_stop_on_tol_like_eager_sweeps(pipeline):
    """The CUDA graph's sweeps, pipelined (sweep k + 1 queued before sweep k's fit is read) or
    not, stop on tol at the same iteration as eager sweeps, with the same factors (the state
    after the last sweep checked, not the one queued after it)."""
    torch = pytest.importorskip("torch")
    shape, rank = (30, 26, 22), 3
    x, init = planted_cp(np.random.default_rng(13), shape, rank, 0.05)
    xd = torch.as_tensor(x, device="cuda")

    def run(fits):
        return T.parafac(xd, rank, init=(None, [torch.as_tensor(f, device="cuda")
                                                for f in init]),
                         n_iter_max=300, tol=1e-7, callback=lambda i, f: fits.append(f))

    prev = (T.cp_als.GRAPH_MIN_ITERATIONS, T.cp_als.PIPELINE)
    eager, graphed = [], []
    try:
        T.cp_als.GRAPH_MIN_ITERATIONS = 10 ** 9
        ref = run(eager)
        assert not T.cp_als.LAST_RUN["graph"]
        T.cp_als.GRAPH_MIN_ITERATIONS, T.cp_als.PIPELINE = prev[0], pipeline
        got = run(graphed)
        assert T.cp_als.LAST_RUN["graph"], T.cp_als.LAST_RUN
        assert ("pipelined" in T.cp_als.LAST_RUN["reason"]) == pipeline
    finally:
        T.cp_als.GRAPH_MIN_ITERATIONS, T.cp_als.PIPELINE = prev
    assert 5 < len(eager) < 300
    assert len(graphed) == len(eager)
    np.testing.assert_allclose(graphed, eager, rtol=0, atol=1e-9)
    assert rel(T.cp_to_tensor(got).cpu().numpy(), T.cp_to_tensor(ref).cpu().numpy()) < 1e-8


@needs_kernel
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rank,n,count", [(1, 5, 1), (7, 33, 2), (33, 640, 2), (64, 1000, 8),
                                          (50, 97, 4)])
def test_factor_then_solve_equals_one_launch(lib, dtype, rank, n, count, variant):
    """solve.factor (one block: the Hadamard product, ridge, L·D·Lᵀ into a workspace) then
    solve(factored=) (each block loads it and solves): the one-launch kernel's result, bit for
    bit (the same factorization and solve), on fresh and on poisoned workspaces."""
    grams, y, eps = _system(rank * 7 + n + count, rank, n, count, dtype)
    gd, yd = [dev(lib, g) for g in grams], dev(lib, y)
    one = host(lib, solve.solve(gd, yd, eps))
    ws = solve.factor(gd, eps)
    two = host(lib, solve.solve([], yd, eps, factored=ws))
    assert np.array_equal(one, two)
    poisoned = dev(lib, np.full(rank * rank + rank, np.nan, dtype=dtype))
    assert solve.factor(gd, eps, poisoned) is poisoned
    assert np.array_equal(host(lib, solve.solve([], yd, eps, factored=poisoned)), one)
    ref = reference([g.astype(np.float64) for g in grams], y.astype(np.float64), eps)
    assert rel(two.astype(np.float64), ref) < (2e-4 if dtype == "float32" else 1e-11)
    assert np.array_equal(host(lib, yd), y)


@needs_kernel
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("normalize", [False, True])
def test_parafac_prefactor_equals_the_one_launch_updates(dtype, normalize):
    """solve.PREFACTOR (each mode's system factorized on a side stream during the tensor pass
    before its update), eager and as a CUDA graph: the same factors as without it."""
    torch = pytest.importorskip("torch")
    shape, rank = (40, 37, 30), 6
    x, init = planted_cp(np.random.default_rng(16), shape, rank, 0.05)
    xd = torch.as_tensor(x.astype(dtype), device="cuda")
    results = {}
    prev, prev_inverse = solve.PREFACTOR, solve.INVERSE
    solve.INVERSE = False  # (the inverse's product rounds otherwise: see the next test)
    try:
        for pf in (False, True):
            solve.PREFACTOR = pf
            for iters in (3, 8):  # eager sweeps, then a CUDA graph
                got = T.parafac(xd, rank, n_iter_max=iters, tol=0, normalize_factors=normalize,
                                init=(None, [torch.as_tensor(f.astype(dtype), device="cuda")
                                             for f in init]), precision="ieee")
                assert T.cp_als.LAST_RUN["solve_kernel"]
                results[pf, iters] = [f.cpu().numpy() for f in got.factors]
            assert T.cp_als.LAST_RUN["graph"], T.cp_als.LAST_RUN
    finally:
        solve.PREFACTOR, solve.INVERSE = prev, prev_inverse
    for iters in (3, 8):
        for a, b in zip(results[False, iters], results[True, iters]):
            assert np.array_equal(a, b)


@needs_kernel
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rank,n,count", [(1, 5, 1), (7, 33, 2), (33, 640, 2), (64, 1000, 8),
                                          (50, 97, 4)])
def test_factor_inverse_then_product(lib, dtype, rank, n, count):
    """solve.factor(inverse=True) (one block: the factorization, then the substitutions
    against the identity: the system's inverse) and solve(factored=, inverse=True) (the product
    by it): the solution to the substitution's accuracy, on fresh and poisoned workspaces."""
    grams, y, eps = _system(rank * 5 + n + count, rank, n, count, dtype)
    gd, yd = [dev(lib, g) for g in grams], dev(lib, y)
    ws = solve.factor(gd, eps, inverse=True)
    got = host(lib, solve.solve([], yd, eps, factored=ws, inverse=True))
    poisoned = dev(lib, np.full(rank * rank + rank, np.nan, dtype=dtype))
    assert solve.factor(gd, eps, poisoned, inverse=True) is poisoned
    again = host(lib, solve.solve([], yd, eps, factored=poisoned, inverse=True))
    assert np.array_equal(got, again)
    # the product's largest magnitude after the inverse (float16's operand scale, Engine.lhs)
    assert host(lib, ws)[rank * rank] == np.abs(got).max()
    inv = host(lib, ws)[: rank * rank].reshape(rank, rank).astype(np.float64)
    ref = reference([g.astype(np.float64) for g in grams], y.astype(np.float64), eps)
    assert rel(got.astype(np.float64), ref) < (2e-4 if dtype == "float32" else 1e-11)
    v = np.prod(np.stack([g.astype(np.float64) for g in grams]), axis=0)
    v += eps * v.diagonal().max() * np.eye(rank)
    assert rel(inv, np.linalg.inv(v)) < (2e-4 if dtype == "float32" else 1e-11)
    assert np.array_equal(host(lib, yd), y)


@needs_kernel
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_parafac_inverse_updates_match_the_substitutions(monkeypatch, dtype):
    """solve.INVERSE (the prefactored updates as products by the systems' inverses), eager and
    as a CUDA graph: the fit of the substitutions' to 2e-5 (float32; H100: 1.6e-6) / 1e-9,
    factors to rounding."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(solve, "PREFACTOR", True)
    shape, rank = (40, 37, 30), 6
    x, init = planted_cp(np.random.default_rng(20), shape, rank, 0.05)
    xd = torch.as_tensor(x.astype(dtype), device="cuda")
    out = {}
    for inverse in (False, True):
        monkeypatch.setattr(solve, "INVERSE", inverse)
        for iters in (3, 8):
            fits = []
            got = T.parafac(xd, rank, n_iter_max=iters, tol=0, callback=lambda i, f:
                            fits.append(f), precision="ieee", init=(None, [torch.as_tensor(
                                f.astype(dtype), device="cuda") for f in init]))
            out[inverse, iters] = ([f.cpu().numpy() for f in got.factors], fits)
    for iters in (3, 8):
        for a, b in zip(out[False, iters][0], out[True, iters][0]):
            assert rel(b.astype(np.float64), a.astype(np.float64)) < (
                1e-4 if dtype == "float32" else 1e-10)
        np.testing.assert_allclose(out[True, iters][1], out[False, iters][1],
                                   rtol=2e-5 if dtype == "float32" else 1e-9, atol=1e-9)


@needs_kernel
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rank,n,count", [(1, 5, 1), (7, 33, 2), (64, 640, 2), (50, 1000, 3)])
def test_fit_terms_kernel_matches_float64(monkeypatch, lib, dtype, rank, n, count):
    """solve.fit_terms (one launch): ‖X̂‖² = wᵀ(∘ Grams)w and ⟨X, X̂⟩ = Σ_r w_r Σ_i y f."""
    monkeypatch.setattr(solve, "FIT_KERNEL", True)
    rng = np.random.default_rng(rank + n + count)
    grams = [rng.standard_normal((rank, rank)).astype(dtype) for _ in range(count)]
    w = rng.random(rank).astype(dtype)
    y, f = (rng.standard_normal((rank, n)).astype(dtype) for _ in range(2))
    args = ([dev(lib, g) for g in grams], dev(lib, w), dev(lib, y), dev(lib, f))
    got = solve.fit_terms(*args)
    assert got is not None
    rec2, ip = (float(host(lib, v)) for v in got)
    assert [float(host(lib, v)) for v in solve.fit_terms(*args)] == [rec2, ip]  # fixed order
    had = np.prod(np.stack(grams).astype(np.float64), axis=0)
    w64 = w.astype(np.float64)
    ref_rec = w64 @ had @ w64
    ref_ip = float(np.sum((y.astype(np.float64) * f) @ np.ones(n) * w64))
    tol = 1e-5 if dtype == "float32" else 1e-12
    assert abs(rec2 - ref_rec) <= tol * np.sum(np.abs(had) * np.outer(w64, w64))
    assert abs(ip - ref_ip) <= tol * np.sum(np.abs(y * f) @ np.ones(n) * w64)
    monkeypatch.setattr(solve, "FIT_KERNEL", False)
    assert solve.fit_terms([dev(lib, g) for g in grams], dev(lib, w), dev(lib, y),
                           dev(lib, f)) is None


@needs_kernel
def test_parafac_fit_kernel_same_factors_and_fits(monkeypatch):
    torch = pytest.importorskip("torch")
    shape, rank = (40, 37, 30), 6
    x, init = planted_cp(np.random.default_rng(18), shape, rank, 0.05)
    # (the fit kernel's own Gram of the last mode rounds otherwise: test_parafac_fit_gram_...)
    monkeypatch.setattr(solve, "FIT_GRAM", False)
    for dtype in ("float32", "float64"):
        xd = torch.as_tensor(x.astype(dtype), device="cuda")
        out = {}
        for fk in (False, True):
            monkeypatch.setattr(solve, "FIT_KERNEL", fk)
            for iters in (3, 8):  # eager sweeps, then a CUDA graph
                fits = []
                got = T.parafac(xd, rank, n_iter_max=iters, tol=0, callback=lambda i, f:
                                fits.append(f), init=(None, [torch.as_tensor(
                                    f.astype(dtype), device="cuda") for f in init]))
                out[fk, iters] = ([f.cpu().numpy() for f in got.factors], fits)
        for iters in (3, 8):
            for a, b in zip(out[False, iters][0], out[True, iters][0]):
                assert np.array_equal(a, b)
            np.testing.assert_allclose(out[True, iters][1], out[False, iters][1], rtol=1e-6,
                                       atol=1e-9)


@needs_kernel
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rank,n,count", [(1, 5, 1), (7, 33, 2), (64, 640, 2), (50, 1000, 6)])
def test_fit_terms_with_the_last_gram(monkeypatch, lib, dtype, rank, n, count):
    """solve.fit_terms(last_gram=True): the last factor's Gram f·fᵀ formed in the same launch
    (symmetric bit for bit) and taken as the Hadamard product's last factor."""
    monkeypatch.setattr(solve, "FIT_KERNEL", True)
    rng = np.random.default_rng(rank * 3 + n + count)
    grams = [rng.standard_normal((rank, rank)).astype(dtype) for _ in range(count)]
    w = rng.random(rank).astype(dtype)
    y, f = (rng.standard_normal((rank, n)).astype(dtype) for _ in range(2))
    args = ([dev(lib, g) for g in grams], dev(lib, w), dev(lib, y), dev(lib, f))
    got = solve.fit_terms(*args, last_gram=True)
    assert got is not None and len(got) == 3
    rec2, ip = (float(host(lib, v)) for v in got[:2])
    g = host(lib, got[2]).astype(np.float64)
    assert np.array_equal(g, g.T)
    f64 = f.astype(np.float64)
    tol = 1e-5 if dtype == "float32" else 1e-12
    assert rel(g, f64 @ f64.T) < tol
    had = np.prod(np.stack([a.astype(np.float64) for a in grams] + [f64 @ f64.T]), axis=0)
    w64 = w.astype(np.float64)
    assert abs(rec2 - w64 @ had @ w64) <= tol * np.sum(np.abs(had) * np.outer(w64, w64))
    ref_ip = float(np.sum((y.astype(np.float64) * f64) @ np.ones(n) * w64))
    assert abs(ip - ref_ip) <= tol * np.sum(np.abs(y * f) @ np.ones(n) * w64)
    assert np.array_equal(host(lib, args[3]), f)  # input untouched


@needs_kernel
def test_parafac_fit_gram_same_fits(monkeypatch):
    """solve.FIT_GRAM (the last mode's Gram formed by the fit kernel), eager and graphed: the
    fits of the GEMM's Gram to 2e-4 (float32, TF32 products; H100: 7.7e-6 in the helper's run,
    6.9e-5 after 8 sweeps at the merged defaults: the factors' own bound below is 1e-4) / 1e-9,
    factors to rounding."""
    torch = pytest.importorskip("torch")
    shape, rank = (40, 37, 30), 6
    x, init = planted_cp(np.random.default_rng(22), shape, rank, 0.05)
    for dtype in ("float32", "float64"):
        xd = torch.as_tensor(x.astype(dtype), device="cuda")
        out = {}
        for fg in (False, True):
            monkeypatch.setattr(solve, "FIT_GRAM", fg)
            for iters in (3, 8):
                fits = []
                got = T.parafac(xd, rank, n_iter_max=iters, tol=0, callback=lambda i, f:
                                fits.append(f), init=(None, [torch.as_tensor(
                                    f.astype(dtype), device="cuda") for f in init]))
                out[fg, iters] = ([f.cpu().numpy() for f in got.factors], fits)
        for iters in (3, 8):
            for a, b in zip(out[False, iters][0], out[True, iters][0]):
                assert rel(b.astype(np.float64), a.astype(np.float64)) < (
                    1e-4 if dtype == "float32" else 1e-10)
            np.testing.assert_allclose(out[True, iters][1], out[False, iters][1],
                                       rtol=2e-4 if dtype == "float32" else 1e-9, atol=1e-9)
