"""The one-pass MTTKRP kernel of kronlinalg.tensor (kernels/tensor, CUDA float32 on TF32 tensor
cores) against float64 NumPy references, on torch and CuPy arrays: odd sizes (output rows not a
multiple of the 128-row tile, inner sizes that put an index boundary inside a 32-row stage),
every rank shape up to 64, orders 3 and 4, factors as views; and CP-ALS through it."""

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



# (shape, modes the kernel must take): output rows 130 / 257 / 124 / 132 (not multiples of
# 128), inner sizes 124, 67, 36 (a boundary of the outer index inside most 32-row stages)
CASES = [((130, 67, 124), (0, 2)), ((257, 36, 132), (0, 2)), ((40, 33, 36, 28), (3,)),
         ((33, 40, 28, 36), (0,))]


@needs_gpu
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("shape,modes", CASES)
@pytest.mark.parametrize("rank", [1, 7, 33, 64])
def test_fused_mttkrp_matches_float64(lib, shape, modes, rank):
    rng = np.random.default_rng(hash((shape, rank)) % 2**32)
    x = rng.standard_normal(shape).astype(np.float32)
    fs = [rng.standard_normal((d, rank)).astype(np.float32) for d in shape]
    xd = dev(lib, x)
    fd = [dev(lib, f) for f in fs]
    if lib == "torch":  # a factor as a transposed view (not contiguous)
        fd[1] = dev(lib, fs[1].T.copy()).T
    for mode in modes:
        ref = unfold(x.astype(np.float64), mode) @ kr_ref(
            [f.astype(np.float64) for i, f in enumerate(fs) if i != mode])
        before = fused.LAUNCHES
        got = T.mttkrp(xd, (None, fd), mode)
        assert fused.LAUNCHES == before + 1, "the kernel did not run"
        got = host(lib, got)
        assert got.shape == ref.shape and got.dtype == np.float32
        err = rel(got.astype(np.float64), ref)
        assert err < 2e-3, (mode, err)  # TF32 inputs (10-bit mantissas), float32 sums
        ieee = host(lib, T.mttkrp(xd, (None, fd), mode, precision="ieee"))
        assert rel(ieee.astype(np.float64), ref) < 1e-5
    # inputs untouched
    assert np.array_equal(host(lib, xd), x)
    assert np.array_equal(host(lib, fd[0]), fs[0])


@needs_gpu
@pytest.mark.parametrize("lib", LIBS)
def test_fused_mttkrp_deterministic_and_weighted(lib):
    rng = np.random.default_rng(5)
    shape, rank = (200, 64, 96), 16
    x = rng.standard_normal(shape).astype(np.float32)
    fs = [rng.standard_normal((d, rank)).astype(np.float32) for d in shape]
    w = rng.random(rank).astype(np.float32)
    xd, fd, wd = dev(lib, x), [dev(lib, f) for f in fs], dev(lib, w)
    for mode in (0, 2):
        a = host(lib, T.mttkrp(xd, (wd, fd), mode))
        b = host(lib, T.mttkrp(xd, (wd, fd), mode))
        assert np.array_equal(a, b)  # partial sums added in a fixed order
        ref = (unfold(x.astype(np.float64), mode)
               @ kr_ref([f.astype(np.float64) for i, f in enumerate(fs) if i != mode])) * w
        assert rel(a.astype(np.float64), ref) < 2e-3


@needs_gpu
@pytest.mark.parametrize("lib", LIBS)
def test_fused_not_taken_where_it_cannot_run(lib):
    rng = np.random.default_rng(6)
    cases = [((130, 67, 124), 65, 0),   # rank above 64
             ((420, 124, 20), 8, 0),    # mode 0's inner size (the last mode) below 32
             ((130, 67, 126), 8, 0),    # row length 67·126 not a multiple of 4
             ((130, 67, 126), 8, 2),    # last mode 126: rows not a multiple of 4
             ((20, 30, 40), 8, 0),      # too small to pay
             ((130, 67, 124), 8, 1)]    # a middle mode
    for shape, rank, mode in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        fs = [rng.standard_normal((d, rank)).astype(np.float32) for d in shape]
        before = fused.LAUNCHES
        got = host(lib, T.mttkrp(dev(lib, x), (None, [dev(lib, f) for f in fs]), mode))
        assert fused.LAUNCHES == before, (shape, rank, mode)
        ref = unfold(x.astype(np.float64), mode) @ kr_ref(
            [f.astype(np.float64) for i, f in enumerate(fs) if i != mode])
        assert rel(got.astype(np.float64), ref) < 2e-3
    # float64 never takes it
    x = rng.standard_normal((130, 67, 124))
    fs = [rng.standard_normal((d, 8)) for d in x.shape]
    before = fused.LAUNCHES
    T.mttkrp(dev(lib, x), (None, [dev(lib, f) for f in fs]), 0)
    assert fused.LAUNCHES == before


@needs_gpu
@pytest.mark.parametrize("lib", LIBS)
def test_parafac_through_the_kernel_matches_float64(lib):
    shape, rank = (130, 67, 124), 6
    x, init = planted_cp(np.random.default_rng(7), shape, rank, 0.1)
    n_iter = 8  # torch: above GRAPH_MIN_ITERATIONS, so the sweep is replayed as a CUDA graph
    ref = T.parafac(x, rank, init=(None, init), n_iter_max=n_iter, tol=0)
    fit64 = 1 - rel(T.cp_to_tensor(ref), x)
    before = fused.LAUNCHES
    got = T.parafac(dev(lib, x.astype(np.float32)), rank, n_iter_max=n_iter, tol=0,
                    init=(None, [dev(lib, f.astype(np.float32)) for f in init]))
    assert fused.LAUNCHES > before
    if lib == "torch":
        assert T.cp_als.LAST_RUN["graph"], T.cp_als.LAST_RUN["reason"]
    rec = host(lib, T.cp_to_tensor(got)).astype(np.float64)
    fit = 1 - rel(rec, x)
    assert abs(fit - fit64) <= 0.01 * fit64, (fit, fit64)
    fused.ENABLED = False
    try:
        lib_path = T.parafac(dev(lib, x.astype(np.float32)), rank, n_iter_max=n_iter, tol=0,
                             init=(None, [dev(lib, f.astype(np.float32)) for f in init]))
    finally:
        fused.ENABLED = True
    assert rel(rec, host(lib, T.cp_to_tensor(lib_path)).astype(np.float64)) < 1e-2


@needs_gpu
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("variant", [0, 1])
def test_fused_mttkrp_both_block_shapes(lib, variant):
    rng = np.random.default_rng(8)
    shape, rank = (257, 36, 132), 40
    x = rng.standard_normal(shape).astype(np.float32)
    fs = [rng.standard_normal((d, rank)).astype(np.float32) for d in shape]
    xd, fd = dev(lib, x), [dev(lib, f) for f in fs]
    fused.VARIANT = variant
    try:
        for mode in (0, 2):
            before = fused.LAUNCHES
            got = host(lib, T.mttkrp(xd, (None, fd), mode)).astype(np.float64)
            assert fused.LAUNCHES == before + 1 and fused.LAST["variant"] == variant
            ref = unfold(x.astype(np.float64), mode) @ kr_ref(
                [f.astype(np.float64) for i, f in enumerate(fs) if i != mode])
            assert rel(got, ref) < 2e-3
    finally:
        fused.VARIANT = 0


@needs_gpu
def test_tucker_concurrent_hosvd_matches_sequential():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(9)
    shape, ranks = (48, 48, 48), (5, 5, 5)
    core = rng.standard_normal(ranks)
    x = core
    for mode, d in enumerate(shape):
        u = np.linalg.qr(rng.standard_normal((d, ranks[mode])))[0]
        x = np.moveaxis(np.tensordot(u, np.moveaxis(x, mode, 0), axes=1), 0, mode)
    x = x + 0.01 * rng.standard_normal(shape)
    ref = T.tucker(x, list(ranks), n_iter_max=1)
    err_ref = rel(T.tucker_to_tensor(ref), x)
    xd = torch.as_tensor(x, device="cuda")
    errs = []
    for concurrent in (True, False):
        T.hooi.CONCURRENT_HOSVD = concurrent
        try:
            for n_iter in (0, 1):
                c, f = T.tucker(xd, list(ranks), n_iter_max=n_iter)
                errs.append(rel(T.tucker_to_tensor((c, f)).cpu().numpy(), x))
                gram = np.stack([(u.T @ u).cpu().numpy() for u in f])
                assert np.allclose(gram, np.eye(5)[None], atol=1e-10)  # orthonormal
        finally:
            T.hooi.CONCURRENT_HOSVD = True
    assert abs(errs[0] - errs[2]) < 1e-10 and abs(errs[1] - errs[3]) < 1e-10
    assert abs(errs[1] - err_ref) <= 1e-6 * err_ref
