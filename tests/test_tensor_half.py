"""Half-precision storage in kronlinalg.tensor (CUDA): the one-pass MTTKRP kernel's float16 /
bfloat16 variant (kernels/tensor/tensor_half_cuda.cu) against float64 references of the same
rounded tensor — odd output rows (not multiples of the 128-row tile), inner sizes that put an
index boundary inside the 64-p stages, ranks not multiples of 16, orders 3 and 4, factors far
outside float16's range, both block shapes — and parafac's half paths (the kernel, the library
path, the half intermediate) against float64's fit."""

from __future__ import annotations

import numpy as np
import pytest

from kronlinalg import tensor as T
from kronlinalg.tensor import fused
from _helpers import (cuda_libs, gpu_array as dev, host_array as host, kr_ref, planted_cp, rel,
                      unfold)

pytestmark = pytest.mark.gpu

LIBS = cuda_libs()
needs_gpu = pytest.mark.skipif(not LIBS, reason="no CUDA device")
# (lib, storage type): CuPy has no bfloat16
STORES = [(lib, dt) for lib in LIBS for dt in ("float16", "bfloat16")
          if lib == "torch" or dt == "float16"]
# the storage's rounding of the Khatri–Rao rows (2⁻¹¹, 2⁻⁸) summed in float32
TOL = {"float16": 3e-3, "bfloat16": 2e-2}



@pytest.fixture
def small_ok(monkeypatch):
    monkeypatch.setattr(fused, "MIN_ELEMENTS", 0)


def stored(lib, x, dtype):
    """x (NumPy float32) on the GPU in the half type, and its rounded values in float64."""
    if lib == "torch":
        import torch

        xd = torch.as_tensor(x, device="cuda").to(getattr(torch, dtype))
        return xd, xd.double().cpu().numpy()
    import cupy as cp

    xd = cp.asarray(x).astype(cp.float16)
    return xd, cp.asnumpy(xd).astype(np.float64)


# output rows 130 / 257 / 33 (not multiples of 128); inner sizes 72, 96, 64 (a boundary of the
# outer index inside most 64-p stages); a 4-way tensor (U the Khatri–Rao product of two modes)
SHAPES = [(130, 67, 72), (257, 33, 96), (33, 12, 10, 64)]


@pytest.fixture(params=[0, 2], ids=["v0", "v2"])
def half_variant(request, monkeypatch):
    """The half kernel's 128-row blocks over p (0) and its b-major blocks (2)."""
    monkeypatch.setattr(fused, "HALF_VARIANT", request.param)
    return request.param


@needs_gpu
@pytest.mark.parametrize("lib,dtype", STORES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rank", [1, 7, 33, 64])
def test_half_mttkrp_matches_float64(small_ok, half_variant, lib, dtype, shape, rank):
    rng = np.random.default_rng(rank * 1000 + sum(shape) + len(dtype))
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    fs = [rng.standard_normal((d, rank)).astype(np.float32) for d in shape]
    xd, x64 = stored(lib, x, dtype)
    fd = [dev(lib, f) for f in fs]
    before = fused.LAUNCHES
    got = fused.stored_mttkrp(xd, fd, 0, 0.5)
    assert got is not None and fused.LAUNCHES == before + 1 and fused.LAST["dtype"] > 0
    assert fused.LAST["variant"] == half_variant
    got = host(lib, got).astype(np.float64)
    ref = 0.5 * unfold(x64, 0) @ kr_ref([f.astype(np.float64) for f in fs[1:]])
    assert got.shape == (shape[0], rank)
    assert rel(got, ref) < TOL[dtype], rel(got, ref)
    again = host(lib, fused.stored_mttkrp(xd, fd, 0, 0.5)).astype(np.float64)
    assert np.array_equal(got, again)  # partial sums added in a fixed order
    assert np.array_equal(host(lib, fd[1]), fs[1])  # inputs untouched


@needs_gpu
@pytest.mark.parametrize("lib,dtype", STORES)
@pytest.mark.parametrize("magnitude", [1e-5, 1e5])
def test_half_mttkrp_factors_outside_float16_range(small_ok, half_variant, lib, dtype,
                                                   magnitude):
    """Products U·V of 1e10 or 1e-10 (beyond float16's 65504 / below its 6e-8): the kernel's
    inputs are scaled by their largest magnitudes, so the result keeps its accuracy."""
    rng = np.random.default_rng(11)
    shape, rank = (130, 67, 72), 20
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    fs = [(magnitude * rng.standard_normal((d, rank))).astype(np.float32) for d in shape]
    xd, x64 = stored(lib, x, dtype)
    got = host(lib, fused.stored_mttkrp(xd, [dev(lib, f) for f in fs])).astype(np.float64)
    ref = unfold(x64, 0) @ kr_ref([f.astype(np.float64) for f in fs[1:]])
    assert np.all(np.isfinite(got))
    assert rel(got, ref) < TOL[dtype], rel(got, ref)


@needs_gpu
@pytest.mark.parametrize("variant", [0, 1, 2])
def test_half_mttkrp_every_block_shape(small_ok, variant):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    shape, rank = (257, 33, 96), 40
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    fs = [rng.standard_normal((d, rank)).astype(np.float32) for d in shape]
    fd = [torch.as_tensor(f, device="cuda") for f in fs]
    prev = fused.HALF_VARIANT
    fused.HALF_VARIANT = variant
    try:
        for dtype in ("float16", "bfloat16"):
            xd, x64 = stored("torch", x, dtype)
            got = fused.stored_mttkrp(xd, fd).double().cpu().numpy()
            assert fused.LAST["variant"] == variant
            ref = unfold(x64, 0) @ kr_ref([f.astype(np.float64) for f in fs[1:]])
            assert rel(got, ref) < TOL[dtype]
    finally:
        fused.HALF_VARIANT = prev


@needs_gpu
def test_half_mttkrp_not_taken_where_it_cannot_run(small_ok):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    for shape, rank, mode in (((130, 67, 40), 8, 0),    # inner size 40 < 64
                              ((130, 67, 70), 8, 0),    # row 67·70 not a multiple of 8
                              ((130, 67, 72), 65, 0),   # rank above 64
                              ((130, 67, 72), 8, 2)):   # the last mode: float32 only
        x = torch.as_tensor(rng.uniform(-1, 1, shape).astype(np.float32), device="cuda")
        fd = [torch.as_tensor(rng.standard_normal((d, rank)).astype(np.float32), device="cuda")
              for d in shape]
        before = fused.LAUNCHES
        assert fused.stored_mttkrp(x.half(), fd, mode) is None
        assert fused.LAUNCHES == before


@needs_gpu
@pytest.mark.parametrize("lib,dtype", STORES)
@pytest.mark.parametrize("r,j,k", [(1, 5, 8), (7, 33, 72), (33, 70, 264), (64, 100, 640),
                                   (5, 41, 776)])
def test_half_contractions_match_float64(lib, dtype, r, j, k):
    """CP-ALS's half intermediate Y (R, J, K) contracted over K (trailing) and over J
    (leading) with a float32 factor: float32 sums of the half values."""
    rng = np.random.default_rng(r * 100 + j + k)
    y = rng.uniform(-30, 30, (r, j, k)).astype(np.float32)
    yd, y64 = stored(lib, y, dtype)
    ft, fl = rng.standard_normal((r, k)), rng.standard_normal((r, j))
    got_t = fused.half_contract(yd, dev(lib, ft.astype(np.float32)), False)
    got_l = fused.half_contract(yd, dev(lib, fl.astype(np.float32)), True)
    ref_t = np.einsum("rjk,rk->rj", y64, ft.astype(np.float32).astype(np.float64))
    ref_l = np.einsum("rjk,rj->rk", y64, fl.astype(np.float32).astype(np.float64))
    assert got_t is not None and got_l is not None
    got_t, got_l = host(lib, got_t), host(lib, got_l)
    assert got_t.shape == (r, j) and got_l.shape == (r, k) and got_t.dtype == np.float32
    assert rel(got_t.astype(np.float64), ref_t) < 1e-5
    assert rel(got_l.astype(np.float64), ref_l) < 1e-5
    # times a pending scale (fused.FOLD_SCALE): a number, or a device float32 scalar — the
    # same bits as multiplying the result
    f_t = dev(lib, ft.astype(np.float32))
    scalar = dev(lib, np.array(0.37, np.float32))
    for mult in (0.37, scalar):
        for leading, f, plain in ((False, f_t, got_t),
                                  (True, dev(lib, fl.astype(np.float32)), got_l)):
            got = host(lib, fused.half_contract(yd, f, leading, mult))
            assert np.array_equal(got, plain * np.float32(0.37)), (leading, mult)
    # not taken: K not a multiple of 8 (the caller then uses torch's bmm)
    if k > 8:
        assert fused.half_contract(yd[:, :, : k - 3], dev(lib, ft.astype(np.float32)), False) \
            is None


@needs_gpu
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("rank,n", [(1, 5), (7, 130), (64, 640), (33, 1000)])
def test_scaled_copy_matches_numpy(monkeypatch, lib, rank, n):
    """scaling.scaled_copy: the largest magnitude, the padded (n, 64) rows, the half copies."""
    from kronlinalg.tensor import scaling

    monkeypatch.setattr(scaling, "KERNEL", True)
    rng = np.random.default_rng(rank + n)
    a = (1e4 * rng.standard_normal((rank, n))).astype(np.float32)
    ad = dev(lib, a)
    assert scaling.supported(ad, True)
    s_ref = np.abs(a).max()
    padded, s = scaling.scaled_copy(ad, pad64=True)
    assert float(host(lib, s)[0]) == s_ref
    ref = np.zeros((n, 64), np.float32)
    ref[:, :rank] = a.T * np.float32(1 / s_ref)
    np.testing.assert_allclose(host(lib, padded), ref, rtol=1e-6, atol=0)
    plain, none = scaling.scaled_copy(ad, pad64=True, scale=False)
    assert none is None and np.array_equal(host(lib, plain)[:, :rank], a.T)
    assert not np.any(host(lib, plain)[:, rank:])
    names = ["float16"] + (["bfloat16"] if lib == "torch" else [])
    for name in names:
        if lib == "torch":
            import torch

            dt = getattr(torch, name)
        else:
            import cupy

            dt = cupy.float16
        half, s = scaling.scaled_copy(ad, out_dtype=dt)
        got = host(lib, half.float() if lib == "torch" else half.astype(np.float32))
        tol = 2 ** -11 if name == "float16" else 2 ** -8
        np.testing.assert_allclose(got, a / s_ref, rtol=tol, atol=1e-7)
    assert np.array_equal(host(lib, ad), a)  # input untouched
    monkeypatch.setattr(scaling, "KERNEL", False)
    assert not scaling.supported(ad)


@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_parafac_half_with_one_launch_scaling(small_ok, monkeypatch, dtype):
    """scaling.KERNEL (the half path's operand scaling in one launch each): the fit of the
    library's scaling to 1e-6, eager and graphed."""
    torch = pytest.importorskip("torch")
    from kronlinalg.tensor import scaling

    shape, rank = (130, 67, 72), 6
    x, init = planted_cp(np.random.default_rng(19), shape, rank, 0.1, relative=True)
    x = torch.as_tensor(x.astype(np.float32), device="cuda")
    init = [torch.as_tensor(f.astype(np.float32), device="cuda") for f in init]
    x64 = x.double()
    fits = {}
    for on in (False, True):
        monkeypatch.setattr(scaling, "KERNEL", on)
        for iters in (3, 8):
            w, f = T.parafac(x, rank, n_iter_max=iters, tol=0, precision=dtype,
                             init=(None, [a.clone() for a in init]))
            err = torch.linalg.norm(T.cp_to_tensor((w, f)).double() - x64) / torch.linalg.norm(x64)
            fits[on, iters] = 1 - float(err)
    # (the two scalings need not round every scaled element alike — one float32 ulp apart is
    # enough for a half copy element to take the neighbouring half value — and 8 sweeps carried
    # that to 4.6e-5 of the fit on an H100 in float16: far inside the half path's 1 % promise)
    for iters in (3, 8):
        assert abs(fits[True, iters] - fits[False, iters]) <= 2e-4 * abs(fits[False, iters])


# the half paths (every knob set, whatever the defaults): the kernel with the float32
# intermediate, the library's half GEMMs, the old path (neither the kernel nor the deferred
# scale), the half intermediate (its kernels or torch's bmm), the b-major kernel
_BASE = {"HALF": True, "DEFER_SCALE": True, "HALF_INTERMEDIATE": False, "HALF_CONTRACT": True,
         "HALF_VARIANT": 0}
PATHS = {"kernel": {},
         "library": {"HALF": False},
         "old": {"HALF": False, "DEFER_SCALE": False},
         "half-intermediate": {"HALF_INTERMEDIATE": True},
         "half-intermediate-bmm": {"HALF_INTERMEDIATE": True, "HALF_CONTRACT": False},
         "library-half-intermediate": {"HALF": False, "HALF_INTERMEDIATE": True},
         "kernel-v2-half-intermediate": {"HALF_VARIANT": 2, "HALF_INTERMEDIATE": True}}


@needs_gpu
@pytest.mark.parametrize("lib,dtype", STORES)
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("shape,rank", [((130, 67, 72), 6), ((96, 33, 10, 64), 5)])
def test_parafac_half_paths_match_float64(small_ok, monkeypatch, lib, dtype, path, shape, rank):
    if lib == "cupy" and "intermediate" in path:
        pytest.skip("the half intermediate is torch's (bmm with float32 output)")
    for name, value in {**_BASE, **PATHS[path]}.items():
        monkeypatch.setattr(fused, name, value)
    x, init = planted_cp(np.random.default_rng(14), shape, rank, 0.1, relative=True)
    n_iter = 8  # torch: above GRAPH_MIN_ITERATIONS, so the sweep is replayed as a CUDA graph
    ref = T.parafac(x, rank, init=(None, init), n_iter_max=n_iter, tol=0)
    fit64 = 1 - rel(T.cp_to_tensor(ref), x)
    before = fused.LAUNCHES
    got = T.parafac(dev(lib, x.astype(np.float32)), rank, n_iter_max=n_iter, tol=0,
                    precision=dtype, init=(None, [dev(lib, f.astype(np.float32)) for f in init]))
    # (the kernel serves CP-ALS's first pass for a 3-way tensor: a 4-way sweep splits at 2)
    kernel = path.startswith(("kernel", "half-intermediate")) and len(shape) == 3
    assert (fused.LAUNCHES > before) == kernel, path
    if lib == "torch":
        assert T.cp_als.LAST_RUN["graph"], T.cp_als.LAST_RUN["reason"]
    assert "float32" in str(got.factors[0].dtype)
    rec = host(lib, T.cp_to_tensor(got)).astype(np.float64)
    fit = 1 - rel(rec, x)
    assert abs(fit - fit64) <= 0.01 * fit64, (fit, fit64)


@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_parafac_half_with_prefactored_updates(small_ok, monkeypatch, dtype):
    """The half path with solve.PREFACTOR (factorizations on a side stream beside the passes):
    the same factors as without it (eager and graphed sweeps)."""
    torch = pytest.importorskip("torch")
    from kronlinalg.tensor import solve

    shape, rank = (130, 67, 72), 6
    x, init = planted_cp(np.random.default_rng(17), shape, rank, 0.1, relative=True)
    x = torch.as_tensor(x.astype(np.float32), device="cuda")
    init = [torch.as_tensor(f.astype(np.float32), device="cuda") for f in init]
    out = {}
    monkeypatch.setattr(solve, "INVERSE", False)  # (the inverse's product rounds otherwise)
    for pf in (False, True):
        monkeypatch.setattr(solve, "PREFACTOR", pf)
        for iters in (3, 8):
            got = T.parafac(x, rank, n_iter_max=iters, tol=0, precision=dtype,
                            init=(None, [f.clone() for f in init]))
            out[pf, iters] = [f.cpu().numpy() for f in got.factors]
    for iters in (3, 8):
        for a, b in zip(out[False, iters], out[True, iters]):
            assert np.array_equal(a, b)


@needs_gpu
def test_parafac_half_kernel_equals_old_path_on_random_data(small_ok, monkeypatch):
    """Random data (fit near 0, as the benchmark's): the kernel path's error within 1 % of the
    old path's and of float32's, same start and iteration count."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(15)
    shape, rank = (128, 80, 96), 16
    x = torch.as_tensor(rng.standard_normal(shape).astype(np.float32), device="cuda")
    init = [torch.as_tensor(rng.random((d, rank)).astype(np.float32), device="cuda")
            for d in shape]
    x64 = x.double()

    def err(precision):
        w, f = T.parafac(x, rank, n_iter_max=6, tol=0, precision=precision,
                         init=(None, [a.clone() for a in init]))
        return float(torch.linalg.norm(T.cp_to_tensor((w, f)).double() - x64)
                     / torch.linalg.norm(x64))

    e32 = err("ieee")
    for dtype in ("float16", "bfloat16"):
        new = err(dtype)
        monkeypatch.setattr(fused, "HALF", False)
        monkeypatch.setattr(fused, "DEFER_SCALE", False)
        old = err(dtype)
        monkeypatch.setattr(fused, "HALF", True)
        monkeypatch.setattr(fused, "DEFER_SCALE", True)
        assert abs(new - e32) <= 0.01 * e32 and abs(old - e32) <= 0.01 * e32, (dtype, new, old,
                                                                              e32)


@needs_gpu
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rank", [1, 33, 64])
@pytest.mark.parametrize("magnitude", [1e-5, 1e5])
def test_half_mttkrp_gram_scale(small_ok, half_variant, lib, shape, rank, magnitude):
    """fused.GRAM_SCALE (float16): U and V enter unscaled with their Gram matrices and the
    kernel scales the Khatri–Rao rows by √(max diag) of each — as accurate as the abs-max
    scales, products far outside float16's range included; a 4-way tensor (U a Khatri–Rao
    product of two factors) keeps the abs-max scales."""
    rng = np.random.default_rng(rank * 7 + sum(shape) + int(np.log10(magnitude)))
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    fs = [(magnitude * rng.standard_normal((d, rank))).astype(np.float32) for d in shape]
    xd, x64 = stored(lib, x, "float16")
    fd = [dev(lib, f) for f in fs]
    gd = [f.T @ f for f in fd]
    got = fused.stored_mttkrp(xd, fd, 0, 0.5, grams=gd)
    assert got is not None and fused.LAST["gram_scale"] == (len(shape) == 3)
    got = host(lib, got).astype(np.float64)
    ref = 0.5 * unfold(x64, 0) @ kr_ref([f.astype(np.float64) for f in fs[1:]])
    assert np.all(np.isfinite(got))
    assert rel(got, ref) < TOL["float16"], rel(got, ref)
    again = host(lib, fused.stored_mttkrp(xd, fd, 0, 0.5, grams=gd)).astype(np.float64)
    assert np.array_equal(got, again)
    assert np.array_equal(host(lib, fd[2]), fs[2])  # inputs untouched
    plain = fused.stored_mttkrp(xd, fd, 0, 0.5)
    assert not fused.LAST["gram_scale"]
    assert rel(host(lib, plain).astype(np.float64), ref) < TOL["float16"]


@needs_gpu
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("rank,n", [(1, 5), (7, 130), (64, 640), (33, 1001)])
def test_gram_scaled_copy_matches_numpy(lib, rank, n):
    """scaling.gram_scaled_copy: s = √(max diag of a·aᵀ) ≥ max |a|, the copy a / s in each
    type (several blocks: 64 × 640 and 33 × 1001 elements)."""
    from kronlinalg.tensor import scaling

    rng = np.random.default_rng(rank * n)
    a = (1e4 * rng.standard_normal((rank, n))).astype(np.float32)
    a[0, n // 2] = 3e5  # (a column dominated by one element: the bound is tight there)
    ad = dev(lib, a)
    gd = ad @ ad.T
    assert scaling.gram_supported(ad, gd)
    s_ref = np.sqrt(np.float64(np.diag(host(lib, gd)).max()))
    names = ["float32", "float16"] + (["bfloat16"] if lib == "torch" else [])
    for name in names:
        if lib == "torch":
            import torch

            dt = getattr(torch, name)
        else:
            import cupy

            dt = getattr(cupy, name)
        out, s = scaling.gram_scaled_copy(ad, gd, dt)
        s = float(host(lib, s)[0])
        assert abs(s - s_ref) <= 1e-6 * s_ref and s >= np.abs(a).max() * (1 - 1e-6)
        got = host(lib, out.float() if lib == "torch" else out.astype(np.float32))
        tol = {"float32": 1e-6, "float16": 2 ** -11, "bfloat16": 2 ** -8}[name]
        np.testing.assert_allclose(got, a / s_ref, rtol=tol, atol=1e-7)
        # given the largest magnitude instead (a factor update's, solve.INVERSE)
        big = dev(lib, np.array([np.abs(a).max()], np.float32))
        assert scaling.gram_supported(ad, None, big)
        out, s = scaling.gram_scaled_copy(ad, None, dt, big)
        assert float(host(lib, s)[0]) == np.abs(a).max()
        got = host(lib, out.float() if lib == "torch" else out.astype(np.float32))
        np.testing.assert_allclose(got, a / np.abs(a).max(), rtol=tol, atol=1e-7)
    assert np.array_equal(host(lib, ad), a)  # input untouched


@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "tf32"])
def test_parafac_gram_scales_and_side_work(small_ok, monkeypatch, dtype):
    """Session 7's switches of the sweep: float16's Gram scales (fused.GRAM_SCALE,
    scaling.GRAM_LHS), bfloat16's unscaled GEMM operand (scaling.BF16_CAST), the Grams on the
    side stream (cp_als.SIDE_GRAMS), the graph's rollback copy beside the sweep
    (cp_als.SIDE_COPY).  The side work alone changes no bit (eager 3 sweeps, graphed 8); the
    scales move the fit by at most 2e-3 of it for float16, 5e-3 for bfloat16 (H100: 2.1e-4
    float16; bfloat16 1.1e-3 in the helper's run, 2.15e-3 at the merged defaults after 8 sweeps:
    the bfloat16 operand cast unscaled rounds differently, and bfloat16's unit roundoff is
    3.9e-3))."""
    torch = pytest.importorskip("torch")
    from kronlinalg.tensor import scaling

    shape, rank = (130, 67, 72), 6
    x, init = planted_cp(np.random.default_rng(21), shape, rank, 0.1, relative=True)
    x = torch.as_tensor(x.astype(np.float32), device="cuda")
    init = [torch.as_tensor(f.astype(np.float32), device="cuda") for f in init]
    x64 = x.double()
    configs = {"off": (False, False), "side": (False, True), "all": (True, True)}
    out, fits = {}, {}
    for name, (scales, side) in configs.items():
        monkeypatch.setattr(fused, "GRAM_SCALE", scales)
        monkeypatch.setattr(scaling, "GRAM_LHS", scales)
        monkeypatch.setattr(scaling, "BF16_CAST", scales)
        monkeypatch.setattr(T.cp_als, "SIDE_GRAMS", side)
        monkeypatch.setattr(T.cp_als, "SIDE_COPY", side)
        for iters in (3, 8):
            w, f = T.parafac(x, rank, n_iter_max=iters, tol=0, precision=dtype,
                             init=(None, [a.clone() for a in init]))
            if iters == 8:
                assert T.cp_als.LAST_RUN["graph"], T.cp_als.LAST_RUN["reason"]
            if dtype == "float16":
                assert fused.LAST["gram_scale"] == scales
            out[name, iters] = [a.cpu().numpy() for a in f]
            err = torch.linalg.norm(T.cp_to_tensor((w, f)).double() - x64) / torch.linalg.norm(x64)
            fits[name, iters] = 1 - float(err)
    for iters in (3, 8):
        for a, b in zip(out["off", iters], out["side", iters]):
            assert np.array_equal(a, b), iters
        tol = 2e-3 if dtype == "float16" else 5e-3
        assert abs(fits["all", iters] - fits["off", iters]) <= tol * abs(fits["off", iters])
