"""The CUDA kron_matmul kernels (fused sliced multiply, tensor-core half path) on CuPy arrays and
CUDA torch tensors, against a dense float64 reference on the exact (rounded) inputs.

All tests carry the gpu marker and skip without a CUDA device.  Shapes are chosen to reach every
code path of the kernels: one fused launch for tiny problems, several passes through scratch,
single-factor passes with column tiles (P = 128), the tensor-core kernel (P a multiple of 8) and
its CUDA-core fallback (other P), rows-fast tiles (kron @ x), and partial tiles.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys

import numpy as np
import pytest

import kronlinalg
from _helpers import (GPU_BACKENDS, assert_close, kron_matmul_ref, make_backend, random, to_numpy,
                      to_xp)

pytestmark = pytest.mark.gpu

ALL_DTYPES = ["float32", "float64", "float16", "bfloat16"]


@pytest.fixture(params=[pytest.param(n, id=n) for n in GPU_BACKENDS], scope="module")
def gxp(request):
    return make_backend(request.param)


def _need(gxp, dtype):
    if dtype not in gxp.dtypes:
        pytest.skip(f"{gxp.name} has no {dtype}")


def _kron_cuda():
    from kronlinalg.testing import extension
    kron_cuda = extension("kron_cuda")

    if kron_cuda is None:
        pytest.skip("built without CUDA")
    return kron_cuda


def _sync(gxp):
    if gxp.is_torch:
        gxp.module.cuda.synchronize()
    else:
        gxp.module.cuda.runtime.deviceSynchronize()


def _check(gxp, rng, shapes, dtype, *, side="right", lead=(5,), n=3, alpha=1.0, beta=0.0,
           y_shape=None):
    fs, fns = zip(*(random(gxp, rng, s, dtype) for s in shapes))
    P, Q = [s[0] for s in shapes], [s[1] for s in shapes]
    if side == "right":
        xs = tuple(lead) + (math.prod(P),)
    else:
        xs = tuple(lead) + (math.prod(Q), n)
    x, xn = random(gxp, rng, xs, dtype)
    kw, yn = {}, None
    if beta != 0.0:
        ys = y_shape
        if ys is None:
            ys = (tuple(lead) + (math.prod(Q),)) if side == "right" else (
                tuple(lead) + (math.prod(P), n))
        y, yn = random(gxp, rng, ys, dtype)
        kw = {"y": y, "beta": beta}
    out = kronlinalg.kron_matmul(x, list(fs), side=side, alpha=alpha, algorithm="sliced", **kw)
    assert_close(out, kron_matmul_ref(xn, fns, side, alpha, beta, yn), gxp, dtype)
    return out


# ---------------------------------------------------------------------------------------------
# dtypes, sides, batch dims, alpha/beta


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shapes", [
    [(8, 8)] * 3,                       # tensor cores (k8), one fused pass
    [(16, 16)] * 3,                     # tensor cores (k16)
    [(4, 4)] * 4,                       # CUDA cores for every dtype
    [(5, 7), (3, 2), (11, 4)],          # mixed, odd sizes
    [(16, 8), (8, 16), (32, 8)],        # rectangular, tensor cores
], ids=["8^3", "16^3", "4^4", "mixed", "rect"])
def test_dtypes_and_sides(gxp, rng, dtype, side, shapes):
    _need(gxp, dtype)
    _check(gxp, rng, shapes, dtype, side=side, lead=(2, 3), alpha=0.75)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_alpha_beta_y(gxp, rng, dtype, side):
    _need(gxp, dtype)
    _check(gxp, rng, [(4, 3), (8, 8), (2, 5)], dtype, side=side, lead=(3,), alpha=-1.5,
           beta=0.5)


def test_y_broadcasts(gxp, rng):
    _check(gxp, rng, [(4, 4), (8, 8)], "float32", lead=(2, 6), beta=2.0, y_shape=(32,))


@pytest.mark.parametrize("side", ["right", "left"])
def test_vector_and_single_row(gxp, rng, side):
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in [(8, 8), (8, 8), (8, 8)]))
    x, xn = random(gxp, rng, (512,), "float32")
    out = kronlinalg.kron_matmul(x, list(fs), side=side, algorithm="sliced")
    assert_close(out, kron_matmul_ref(xn, fns, side), gxp, "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("P", [64, 128])
def test_large_factors(gxp, rng, dtype, P):
    _need(gxp, dtype)
    _check(gxp, rng, [(P, P), (P, P)], dtype, lead=(6,))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_many_passes(gxp, rng, dtype):
    """8^7 with 33 rows: two or three passes through scratch, partial tiles at the ends."""
    _need(gxp, dtype)
    _check(gxp, rng, [(8, 8)] * 7, dtype, lead=(3,))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uneven_groups(gxp, rng, dtype):
    """Eight mixed factors whose fusable group lengths differ along the chain: the even
    spreading of groups runs out of passes early and the greedy grouping must take over
    (this shape once divided by zero in the planner)."""
    _need(gxp, dtype)
    shapes = [(8, 3), (9, 3), (6, 4), (3, 3), (2, 2), (2, 2), (9, 5), (3, 5)]
    _check(gxp, rng, shapes, dtype, lead=(65,))


def test_huge_factor_falls_back(gxp, rng):
    """A factor too large for one block's shared memory: the kernels say so (the planner's
    facts), auto takes the shuffle algorithm, and forcing "sliced" is a ValueError that names
    the algorithms that run it."""
    shapes = [(3, 2), (40000, 2)]
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in shapes))
    x, xn = random(gxp, rng, (2, 3 * 40000), "float32")
    out = kronlinalg.kron_matmul(x, list(fs))
    assert_close(out, kron_matmul_ref(xn, fns), gxp, "float32")
    with pytest.raises(ValueError, match="sliced.*does not run kron_matmul.*shuffle"):
        kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")


# ---------------------------------------------------------------------------------------------
# the kron_small benchmark set: every factor in one launch


def _cases():
    here = os.path.dirname(__file__)
    for base in (os.path.join(here, "..", "..", "shared", "bench"),
                 os.path.join(here, "..", "shared", "bench")):
        path = os.path.join(base, "cases.json")
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
    return None


def _small_shapes():
    cases = _cases()
    raw = cases["kron_small"]["cases"] if cases else [
        [16, [[2, 2], 10]], [64, [[4, 4], 5]], [8, [[8, 8], 3]], [32, [[3, 3], 6]],
        [4, [[16, 16], 3]], [128, [[5, 7], [3, 2], [11, 4]]]]
    out = []
    for m, spec in raw:
        if len(spec) == 2 and isinstance(spec[1], int):
            shapes = [tuple(spec[0])] * spec[1]
        else:
            shapes = [tuple(s) for s in spec]
        out.append((m, shapes))
    return out


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("case", _small_shapes(), ids=lambda c: f"M{c[0]}-{len(c[1])}f")
def test_kron_small_one_launch(gxp, rng, dtype, case):
    _need(gxp, dtype)
    m, shapes = case
    _check(gxp, rng, shapes, dtype, lead=(m,))
    kc = _kron_cuda()
    descs = [(0, p, q, q, 1) for p, q in shapes]
    k = math.prod(p for p, _ in shapes)
    text = kc.config(1, m, descs, (256, m * k, k, 1), (256, 0, 0, 1), kc.DTYPES[dtype])
    assert text.startswith("passes=1 "), text


# ---------------------------------------------------------------------------------------------
# poisoned memory, layouts, streams


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_poisoned_y_and_scratch(gxp, rng, dtype):
    """beta == 0 never reads y; scratch taken from a pool full of NaN is always written first."""
    _need(gxp, dtype)
    mod = gxp.module
    shapes = [(8, 8)] * 6
    k = 8 ** 6
    nan = (mod.full((4 * k * 3,), float("nan"), dtype=getattr(mod, dtype),
                    device=gxp.device) if gxp.is_torch else
           mod.full((4 * k * 3,), np.nan, dtype=dtype))
    del nan  # back to the pool: the scratch buffers reuse this memory
    fs, fns = zip(*(random(gxp, rng, s, dtype) for s in shapes))
    x, xn = random(gxp, rng, (4, k), dtype)
    y = to_xp(gxp, np.full((4, k), np.nan), dtype)
    out = kronlinalg.kron_matmul(x, list(fs), y=y, beta=0.0, algorithm="sliced")
    assert_close(out, kron_matmul_ref(xn, fns), gxp, dtype)


@pytest.mark.parametrize("side", ["right", "left"])
def test_non_contiguous_inputs(gxp, rng, side):
    mod = gxp.module
    shapes = [(4, 3), (6, 5)]
    P, Q = 24, 15
    # factors as transposed views, x as a strided slice of a larger array
    fts, fns = zip(*(random(gxp, rng, (q, p), "float64") for p, q in shapes))
    fs = [f.T if not gxp.is_torch else f.mT for f in fts]
    fns = [f.T for f in fns]
    big, bign = random(gxp, rng, (7, 2 * (P if side == "right" else Q), 9), "float64")
    if side == "right":
        x, xn = big[:, ::2, 3], bign[:, ::2, 3]
    else:
        x, xn = big[:, ::2, 1:8], bign[:, ::2, 1:8]
    out = kronlinalg.kron_matmul(x, fs, side=side, algorithm="sliced")
    assert_close(out, kron_matmul_ref(xn, fns, side), gxp, "float64")
    if not gxp.is_torch:  # CuPy views may have negative strides
        out = kronlinalg.kron_matmul(x[::-1], fs, side=side, algorithm="sliced")
        assert_close(out, kron_matmul_ref(xn[::-1], fns, side), gxp, "float64")
    del mod


def test_fortran_ordered_x(gxp, rng):
    """Rows adjacent in memory (x transposed in memory): tiles run along rows."""
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in [(8, 8), (4, 4)]))
    xt, xtn = random(gxp, rng, (32, 300), "float32")
    x = xt.mT if gxp.is_torch else xt.T
    out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")
    assert_close(out, kron_matmul_ref(xtn.T, fns), gxp, "float32")


def test_torch_stream(rng):
    torch = pytest.importorskip("torch")
    gxp = make_backend("torch_cuda")
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in [(16, 16)] * 3))
    x, xn = random(gxp, rng, (64, 4096), "float32")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")
        out2 = out * 2.0  # enqueued behind the kernel on the same stream
    s.synchronize()
    assert_close(out2, 2.0 * kron_matmul_ref(xn, fns), gxp, "float32")


def test_cupy_stream(rng):
    cupy = pytest.importorskip("cupy")
    gxp = make_backend("cupy")
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in [(16, 16)] * 3))
    x, xn = random(gxp, rng, (64, 4096), "float32")
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")
        out2 = out * 2.0
    s.synchronize()
    assert_close(out2, 2.0 * kron_matmul_ref(xn, fns), gxp, "float32")


# ---------------------------------------------------------------------------------------------
# every compiled configuration the planner can reach, through the tuning overrides


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("lines", [0, 4, 8, 32, 96])
@pytest.mark.parametrize("budget_kb", [0, 48])
def test_tuning_overrides_stay_correct(gxp, rng, dtype, lines, budget_kb):
    _need(gxp, dtype)
    kc = _kron_cuda()
    kc.tune(lines=lines, smem_budget_kb=budget_kb)
    try:
        for shapes, lead in [([(8, 8)] * 5, (9,)), ([(32, 32)] * 2, (5,)),
                             ([(3, 3), (16, 16), (5, 4)], (13,))]:
            _check(gxp, rng, shapes, dtype, lead=lead)
            _check(gxp, rng, shapes, dtype, side="left", lead=(2,), n=11)
    except RuntimeError as err:  # an override no tile satisfies is reported, not run
        assert "does not fit" in str(err), err
    finally:
        kc.tune()


def test_config_reports_the_plan(gxp):
    kc = _kron_cuda()
    k = 16 ** 5
    descs = [(0, 16, 16, 16, 1)] * 5
    text = kc.config(1, 1024, descs, (256, 1024 * k, k, 1), (256, 1024 * k, k, 1),
                     kc.DTYPES["float32"])
    assert text.startswith("passes=")
    assert "kernel=" in text and "grid=" in text
    elems, nbufs = kc.workspace(1, 1024, descs, (256, 1024 * k, k, 1), kc.DTYPES["float32"])
    assert nbufs in (0, 1, 2) and (elems > 0) == (nbufs > 0)


def test_float32_cuda_core_groups_leave_room_for_two_blocks(gxp):
    """The planner holds float32 groups of factors on CUDA cores to half an SM's shared memory
    (two blocks per SM); a single factor may still take it all, and float64 is unchanged."""
    kc = _kron_cuda()
    try:
        import cupy

        per_sm = cupy.cuda.Device().attributes["MaxSharedMemoryPerMultiprocessor"]
    except ImportError:
        import torch

        per_sm = torch.cuda.get_device_properties(0).shared_memory_per_multiprocessor
    k = 8 ** 7
    descs = [(0, 8, 8, 8, 1)] * 7
    text = kc.config(1, 1024, descs, (256, 1024 * k, k, 1), (256, 1024 * k, k, 1),
                     kc.DTYPES["float32"])
    groups = re.findall(r"factors (\d+)\.\.(\d+) kernel=(\S+) .* smem=(\d+)", text)
    assert groups, text
    covered = sorted(i for lo, hi, _, _ in groups for i in range(int(lo), int(hi) + 1))
    assert covered == list(range(7)), text
    for lo, hi, kernel, smem in groups:
        if "ffma" in kernel and lo != hi:
            assert int(smem) <= per_sm // 2, text


# ---------------------------------------------------------------------------------------------
# the per-call fast path (a signature seen before skips validation and planning)


@pytest.mark.parametrize("algorithm", ["sliced", "auto"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_repeated_calls_take_fresh_operands(gxp, rng, algorithm, dtype):
    """Same signature, new data, alpha, then y, a tuning change, other strides and a vector:
    every call's result matches its own reference (nothing stale from the cached signature)."""
    kron_mod = sys.modules["kronlinalg.kron"]  # the module (kronlinalg.kron is the function)

    _need(gxp, dtype)
    shapes = [(4, 3), (5, 6), (3, 3)]
    k = math.prod(p for p, _ in shapes)
    for rep in range(3):
        fs, fns = zip(*(random(gxp, rng, s, dtype) for s in shapes))
        x, xn = random(gxp, rng, (7, k), dtype)
        alpha = [1.0, -2.5, 3][rep]
        out = kronlinalg.kron_matmul(x, list(fs), alpha=alpha, algorithm=algorithm)
        assert_close(out, kron_matmul_ref(xn, fns, "right", alpha, 0.0, None), gxp, dtype)
    if dtype != "bfloat16" and algorithm == "sliced":
        assert any(key[1] == "sliced" for key in kron_mod.OPERATION.cached_signatures()), "fast path never armed"
    y, yn = random(gxp, rng, (7, 54), dtype)
    out = kronlinalg.kron_matmul(x, list(fs), beta=0.5, y=y, algorithm=algorithm)
    assert_close(out, kron_matmul_ref(xn, fns, "right", 1.0, 0.5, yn), gxp, dtype)
    kc = _kron_cuda()
    kc.tune(lines=8)
    try:
        out = kronlinalg.kron_matmul(x, list(fs), algorithm=algorithm)
        assert_close(out, kron_matmul_ref(xn, fns, "right", 1.0, 0.0, None), gxp, dtype)
    finally:
        kc.tune()
    out = kronlinalg.kron_matmul(x, tuple(fs), algorithm=algorithm)  # a tuple of factors
    assert_close(out, kron_matmul_ref(xn, fns, "right", 1.0, 0.0, None), gxp, dtype)
    xt, xtn = random(gxp, rng, (k, 7), dtype)  # a transposed view: other strides
    out = kronlinalg.kron_matmul(xt.T, list(fs), algorithm=algorithm)
    assert_close(out, kron_matmul_ref(xtn.T, fns, "right", 1.0, 0.0, None), gxp, dtype)
    with pytest.raises(TypeError, match="alpha"):
        kronlinalg.kron_matmul(x, list(fs), alpha="2", algorithm=algorithm)
    with pytest.raises(ValueError, match="x"):
        kronlinalg.kron_matmul(x[:, :-1], list(fs), algorithm=algorithm)


def test_fast_path_respects_autograd(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch: no CUDA device")
    x = torch.randn(6, 24, device="cuda", dtype=torch.float64)
    fs = [torch.randn(4, 2, device="cuda", dtype=torch.float64),
          torch.randn(6, 3, device="cuda", dtype=torch.float64)]
    kronlinalg.kron_matmul(x, fs, algorithm="sliced")  # arms the fast path for this signature
    xg = x.clone().requires_grad_(True)
    out = kronlinalg.kron_matmul(xg, fs, algorithm="sliced")
    assert out.requires_grad
    out.sum().backward()
    k = torch.kron(fs[0], fs[1])
    torch.testing.assert_close(xg.grad, torch.ones(6, 6, device="cuda", dtype=torch.float64) @ k.T)


# ---------------------------------------------------------------------------------------------
# float32 modes: 3xTF32 tensor cores (passes whose factors all have P % 8 == 0) and IEEE FMAs


@pytest.fixture(params=["tf32x3", "ieee"])
def fp32_mode(request):
    kron_mod = sys.modules["kronlinalg.kron"]
    start = kron_mod.float32_precision()
    kron_mod.float32_precision(request.param)
    yield request.param
    kron_mod.float32_precision(start)


@pytest.fixture(params=["tf32x3", "tf32x3-forced", "ieee"])
def fp32_path(request):
    """A float32 mode, and "tf32x3-forced": tensor cores for every group with P % 8 == 0, also
    where the planner would keep CUDA cores (Q < 16)."""
    kron_mod = sys.modules["kronlinalg.kron"]
    start = kron_mod.float32_precision()
    kron_mod.float32_precision(request.param.split("-")[0])
    if request.param.endswith("forced"):
        _kron_cuda().tune(kind=1)
    yield request.param
    _kron_cuda().tune()
    kron_mod.float32_precision(start)


def _poison_pool(gxp, nbytes):
    """Fill nbytes of the library's memory pool with NaN and free them again: outputs and
    scratch allocated next come from that memory, so an element the kernel leaves unwritten
    shows up as a NaN."""
    mod = gxp.module
    n = max(1, nbytes // 4)
    if gxp.is_torch:
        a = mod.full((n,), float("nan"), dtype=mod.float32, device=gxp.device)
    else:
        a = mod.full((n,), np.nan, dtype="float32")
    _sync(gxp)
    del a


def _kernels_of(dtype, shapes, m, side="right"):
    """The kernel names of the plan of a contiguous x @ kron (or kron @ x) problem."""
    kc = _kron_cuda()
    k = math.prod(p for p, _ in shapes)
    nq = math.prod(q for _, q in shapes)
    descs = [(0, p, q, q, 1) for p, q in shapes]
    text = kc.config(1, m, descs, (256, m * k, k, 1), (256, m * nq, nq, 1), kc.DTYPES[dtype])
    return re.findall(r"kernel=(\S+)", text)


# (shapes, lead): P = 8 .. 128, Q not a multiple of 8, odd rows, fused steps, several passes
F32_TC_CASES = [
    ([(8, 8)] * 4, (7,)),                      # WN 1, four fused steps
    ([(16, 16)] * 3, (33,)),                   # WN 2
    ([(24, 24), (8, 5)], (1,)),                # P = 24 (three k8 steps), Q = 5
    ([(32, 32)] * 2, (2, 3)),                  # WN 4, batch dims
    ([(16, 12), (8, 5), (32, 24)], (7,)),      # mixed P / Q
    ([(64, 64)] * 2, (5,)),                    # Q > 32: several column groups
    ([(128, 128)], (3,)),                      # P = 128
    ([(8, 8)] * 7, (3,)),                      # several passes through scratch
    ([(3, 3), (16, 16), (8, 4)], (13,)),       # a P % 8 != 0 factor: CUDA cores for its pass
]


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("case", F32_TC_CASES, ids=lambda c: "-".join(f"{p}x{q}" for p, q in c[0]))
def test_float32_modes(gxp, rng, fp32_path, case, side):
    shapes, lead = case
    k = math.prod(p for p, _ in shapes)
    nq = math.prod(q for _, q in shapes)
    size = 3 * 4 * 11 * math.prod(lead) * max(k, nq)  # output and two scratch buffers
    _poison_pool(gxp, min(size, 1 << 28))
    _check(gxp, rng, shapes, "float32", side=side, lead=lead, n=11, alpha=0.75)
    _poison_pool(gxp, min(size, 1 << 28))
    _check(gxp, rng, shapes, "float32", side=side, lead=lead, n=3, alpha=-1.5, beta=0.5)


def test_float32_modes_pick_their_kernels(gxp, fp32_mode):
    tc = _kernels_of("float32", [(16, 16)] * 3, 64)
    assert tc and all(("tf32x3" in k) == (fp32_mode == "tf32x3") for k in tc), tc
    # factors with P % 8 != 0 stay on CUDA cores in either mode, and so do Q < 16 unless forced
    assert all("ffma" in k for k in _kernels_of("float32", [(5, 5)] * 3, 64))
    # (float64: CUDA cores, or DMMA on the natural-order kernel on sm_90)
    assert all("ffma" in k or "dmma.natural" in k
               for k in _kernels_of("float64", [(16, 16)] * 3, 64))
    # (P = 8 in 3xTF32 mode: the natural-order kernel where x is contiguous)
    assert all("ffma" in k or (fp32_mode == "tf32x3" and "natural" in k)
               for k in _kernels_of("float32", [(8, 8)] * 3, 64))
    kc = _kron_cuda()
    kc.tune(kind=1)
    try:
        forced = _kernels_of("float32", [(8, 8)] * 3, 64)
        assert all(("tf32x3" in k) == (fp32_mode == "tf32x3") for k in forced), forced
    finally:
        kc.tune()


def test_float32_modes_differ_within_tolerance(gxp, rng):
    """Both modes within float32's tolerance on a long reduction (P = 128), and their results
    differ: the switch reaches the kernel."""
    kron_mod = sys.modules["kronlinalg.kron"]
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in [(128, 128), (128, 64)]))
    x, xn = random(gxp, rng, (40, 128 * 128), "float32")
    ref = kron_matmul_ref(xn, fns)
    start = kron_mod.float32_precision()
    got = {}
    try:
        for mode in ("tf32x3", "ieee"):
            kron_mod.float32_precision(mode)
            out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")
            assert_close(out, ref, gxp, "float32")
            got[mode] = to_numpy(out)
    finally:
        kron_mod.float32_precision(start)
    assert not np.array_equal(got["tf32x3"], got["ieee"])


@pytest.mark.parametrize("tile_q", [8, 16, 32])
@pytest.mark.parametrize("lines", [0, 4, 8, 32])
def test_tf32_tile_configs(gxp, rng, tile_q, lines):
    """Every compiled 3xTF32 column tile (8, 16, 32 columns per warp) with several line tiles,
    on fused and single-step passes, both sides, strided x."""
    kc = _kron_cuda()
    kron_mod = sys.modules["kronlinalg.kron"]
    start = kron_mod.float32_precision("tf32x3")
    kc.tune(lines=lines, tile_q=tile_q, kind=1)
    try:
        for shapes, lead in [([(8, 8)] * 3, (9,)), ([(32, 16), (16, 8)], (5,)),
                             ([(64, 40)], (7,))]:
            assert all("tf32x3.wn%d" % (tile_q // 8) in k for k in _kernels_of("float32", shapes, 9))
            _poison_pool(gxp, 4 * 9 * 4096 * 11)
            _check(gxp, rng, shapes, "float32", lead=lead)
            _check(gxp, rng, shapes, "float32", side="left", lead=(2,), n=7)
    except RuntimeError as err:  # an override no tile satisfies is reported, not run
        assert "does not fit" in str(err), err
    finally:
        kc.tune()
        kron_mod.float32_precision(start)


@pytest.mark.parametrize("side", ["right", "left"])
def test_float32_modes_strided_x(gxp, rng, fp32_mode, side):
    """x as a strided slice (element stride 2) and as a transposed view (rows adjacent in
    memory, the prefetching tile loader) on tensor-core-eligible factors."""
    shapes = [(16, 16), (16, 32)]
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in shapes))
    k = 256 if side == "right" else 512
    big, bign = random(gxp, rng, (6, 2 * k, 9), "float32")
    x, xn = (big[:, ::2, 3], bign[:, ::2, 3]) if side == "right" else (big[:, ::2, 1:8],
                                                                         bign[:, ::2, 1:8])
    out = kronlinalg.kron_matmul(x, list(fs), side=side, algorithm="sliced")
    assert_close(out, kron_matmul_ref(xn, fns, side), gxp, "float32")
    xt, xtn = random(gxp, rng, (256, 300), "float32")
    xv = xt.mT if gxp.is_torch else xt.T
    out = kronlinalg.kron_matmul(xv, list(fs), algorithm="sliced", alpha=2.0)
    assert_close(out, kron_matmul_ref(xtn.T, fns, "right", 2.0), gxp, "float32")


# ---------------------------------------------------------------------------------------------
# the natural-order 3xTF32 kernel (contiguous x @ kron, groups of P x P factors, P = 8 ... 64):
# line tiles (the group at the end of the chain), column tiles (the others), 1-4 steps


# (shapes, lead): partial line tiles (rows not a multiple of the tile), every P, one to three
# steps, column tiles of 8, 16 and 256 i, a chain ending in a factor the kernel does not take
NATURAL_CASES = [
    ([(8, 8)] * 3, (33,)),                    # P = 8: k8 blocks, 8-byte loads
    ([(8, 8)] * 7, (3,)),                     # several passes (P = 8: 3-step groups only)
    ([(8, 8)] * 4, (5,)),
    ([(16, 16)] * 3, (33,)),                  # one pass of 3 steps, one line per tile
    ([(16, 16)] * 5, (7,)),                   # line pass and column pass
    ([(16, 16)], (300,)),                     # one step, 256-line tiles, the last partial
    ([(32, 32)] * 2, (2, 3)),                 # leading batch dims
    ([(32, 32)] * 4, (5,)),                   # 2 + 2
    ([(32, 32)] * 3, (9,)),                   # one 3-step pass on the ring kernel
    ([(64, 64)] * 2, (5,)),
    ([(64, 64)] * 3, (3,)),
    ([(32, 32), (32, 32), (4, 5)], (11,)),    # I = 5: column tiles do not divide, fallback
    ([(16, 16), (32, 32)], (13,)),            # mixed P: the other kernels
]


def _natural_on(monkeypatch, on):
    """Turns the natural-order kernel on or off; packed layouts sized under the other setting
    are dropped (tune() with no overrides does that: the knobs are read when a plan is made)."""
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL", "1" if on else "0")
    _kron_cuda().tune()


def _elementwise(out, ref, gxp, rtol=2e-5):
    got = to_numpy(out).astype(np.float64)
    scale = np.abs(ref).max()
    assert np.all(np.isfinite(got))
    assert np.abs(got - ref).max() <= rtol * max(scale, 1e-30)


@pytest.mark.parametrize("case", NATURAL_CASES,
                         ids=lambda c: "-".join(f"{p}x{q}" for p, q in c[0]) + f"-m{c[1]}")
def test_natural_kernel(gxp, rng, monkeypatch, case):
    _natural_on(monkeypatch, True)
    shapes, lead = case
    k = math.prod(p for p, _ in shapes)
    size = 3 * 4 * math.prod(lead) * k
    for alpha, beta in [(0.75, 0.0), (-1.5, 0.5)]:
        _poison_pool(gxp, min(size, 1 << 28))
        fs, fns = zip(*(random(gxp, rng, s, "float32") for s in shapes))
        x, xn = random(gxp, rng, tuple(lead) + (k,), "float32")
        y, yn = random(gxp, rng, tuple(lead) + (math.prod(q for _, q in shapes),),
                       "float32")
        kw = {"y": y, "beta": beta} if beta else {}
        out = kronlinalg.kron_matmul(x, list(fs), alpha=alpha, algorithm="sliced", **kw)
        ref = kron_matmul_ref(xn, fns, "right", alpha, beta, yn if beta else None)
        assert_close(out, ref, gxp, "float32")
        _elementwise(out, ref, gxp)


def test_natural_kernel_is_planned(gxp, monkeypatch):
    """The natural-order kernel takes the passes it applies to, and none where it is off."""
    _natural_on(monkeypatch, True)
    assert _kernels_of("float32", [(32, 32)] * 4, 1024) == ["f32.tf32x3.natural.p32",
                                                            "f32.tf32x3.natural_ring.p32"]
    assert set(_kernels_of("float32", [(16, 16)] * 5, 1024)) == {"f32.tf32x3.natural.p16"}
    assert not any("natural" in k for k in _kernels_of("float32", [(24, 24)] * 2, 64))
    _natural_on(monkeypatch, False)
    assert not any("natural" in k for k in _kernels_of("float32", [(32, 32)] * 4, 1024))


def test_natural_kernel_matches_the_other_kernels(gxp, rng, monkeypatch):
    """The same product on the natural-order kernel and on the fused tensor-core kernel."""
    shapes = [(32, 32)] * 3
    fs, _ = zip(*(random(gxp, rng, s, "float32") for s in shapes))
    x, _ = random(gxp, rng, (37, 32 ** 3), "float32")
    outs = []
    for on in (True, False):
        _natural_on(monkeypatch, on)
        outs.append(to_numpy(kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")))
    a, b = (o.astype(np.float64) for o in outs)
    assert np.linalg.norm(a - b) <= 1e-5 * np.linalg.norm(b)


def test_natural_kernel_unaligned_x_falls_back(gxp, rng, monkeypatch):
    """A row view whose data does not start on 16 bytes goes to the other kernels, correctly."""
    _natural_on(monkeypatch, True)
    shapes = [(16, 16)] * 2
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in shapes))
    flat, flatn = random(gxp, rng, (3 * 256 + 1,), "float32")
    x, xn = flat[1:].reshape(3, 256), flatn[1:].reshape(3, 256)
    out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")
    assert_close(out, kron_matmul_ref(xn, fns, "right"), gxp, "float32")


@pytest.mark.parametrize("warps", [4, 8])
@pytest.mark.parametrize("shapes", [[(8, 8)] * 3, [(16, 16)] * 3, [(32, 32)] * 2, [(64, 64)] * 2],
                         ids=["8^3", "16^3", "32^2", "64^2"])
def test_natural_kernel_block_sizes(gxp, rng, monkeypatch, warps, shapes):
    """Both block sizes (and so both tile sizes) of every compiled P, line and column tiles."""
    _natural_on(monkeypatch, True)
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_WARPS", str(warps))
    _poison_pool(gxp, 3 * 4 * 21 * math.prod(p for p, _ in shapes) * 8)
    _check(gxp, rng, shapes, "float32", lead=(21,), alpha=0.5)
    _check(gxp, rng, shapes + [(1, 8)], "float32", lead=(3,))  # column tiles of I = 8


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("shapes,m,T", [
    ([(32, 32)] * 2, 3203, 2),      # fewer warp items than warps: warps finish a tile unevenly
    ([(16, 16)] * 3, 2001, 1),
    ([(8, 8)] * 3, 2001, 1),
    ([(64, 64)] * 2, 2001, 0),      # two column groups, results through the second buffer
    ([(32, 32)] * 2 + [(1, 8)], 1999, 0),   # column tiles of 8 i
], ids=["32^2", "16^3", "8^3", "64^2", "32^2-cols"])
def test_natural_kernel_many_tiles_per_block(gxp, rng, monkeypatch, stages, shapes, m, T):
    """Persistent blocks that take many tiles each, with the next tiles' loads in flight while
    a tile is computed in place: every element against the float64 reference."""
    _natural_on(monkeypatch, True)
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_STAGES", str(stages))
    if T:
        monkeypatch.setenv("KRONLINALG_KRON_NATURAL_T", str(T))
    k = math.prod(p for p, _ in shapes)
    _poison_pool(gxp, min(3 * 4 * m * k, 1 << 28))
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in shapes))
    x, xn = random(gxp, rng, (m, k), "float32")
    out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")
    ref = kron_matmul_ref(xn, fns, "right")
    assert_close(out, ref, gxp, "float32")
    _elementwise(out, ref, gxp)


def test_natural_groups_are_longer(gxp, monkeypatch):
    """The natural-order kernel takes part in grouping: P = 64 groups of 2, where the other
    kernels take 1; P = 8 groups of at most 3 (8^7: 3 + 2 + 2, not 4 + 3)."""
    _natural_on(monkeypatch, True)
    assert _kernels_of("float32", [(64, 64)] * 3, 1024) == ["f32.tf32x3.natural.p64"] * 2
    assert _kernels_of("float32", [(64, 64)] * 4, 16) == ["f32.tf32x3.natural.p64"] * 3
    eight = _kernels_of("float32", [(8, 8)] * 7, 1024)
    assert len(eight) == 3 and eight[0] == "f32.tf32x3.natural.p8"
    # P = 16, six factors: 3 + 3, the column pass on the ring kernel (tiles of 8 i); without it
    # 2 + 2 + 2, and 3 + 3 on plain column tiles of 4 i where those are allowed (opt-in)
    assert _kernels_of("float32", [(16, 16)] * 6, 16) == ["f32.tf32x3.natural.p16",
                                                          "f32.tf32x3.natural_ring.p16"]
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING", "0")
    assert _kernels_of("float32", [(16, 16)] * 6, 16) == ["f32.tf32x3.natural.p16"] * 3
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_TI_MIN", "4")
    assert _kernels_of("float32", [(16, 16)] * 6, 16) == ["f32.tf32x3.natural.p16"] * 2


def test_natural_two_passes_of_three_steps(gxp, rng, monkeypatch):
    """16^6 in two 3-step passes (the second on column tiles of 4 i, opt-in), x and y 16-byte
    aligned, alpha and beta applied: every element against the float64 reference."""
    _natural_on(monkeypatch, True)
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_TI_MIN", "4")
    shapes = [(16, 16)] * 6
    k = 16 ** 6
    _poison_pool(gxp, 3 * 4 * 3 * k)
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in shapes))
    x, xn = random(gxp, rng, (3, k), "float32")
    y, yn = random(gxp, rng, (3, k), "float32")
    out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced", alpha=0.5, beta=-2.0, y=y)
    ref = kron_matmul_ref(xn, fns, "right", alpha=0.5, beta=-2.0, y=yn)
    assert_close(out, ref, gxp, "float32")
    _elementwise(out, ref, gxp)


# the ring form: 3-step groups whose smallest tile does not fit twice - P = 32 line tiles (one
# line of 32^3), alone, with more tiles than blocks (the ring wraps), before a column pass; P = 16
# column tiles of 8 i after a line pass (16^6 in 3 + 3) - and P = 32 column groups with enough
# tiles, on tiles of 32 i (32^5's second pass; 32^4's, few and many tiles a block)
RING_CASES = [
    ([(32, 32)] * 3, 3, ["natural_ring.p32"]),
    ([(32, 32)] * 3, 301, ["natural_ring.p32"]),
    ([(32, 32)] * 5, 2, ["natural_ring.p32", "natural_ring.p32"]),
    ([(16, 16)] * 6, 1, ["natural.p16", "natural_ring.p16"]),
    ([(32, 32)] * 4, 17, ["natural.p32", "natural_ring.p32"]),
    ([(32, 32)] * 4, 67, ["natural.p32", "natural_ring.p32"]),
]


@pytest.mark.parametrize("case", RING_CASES, ids=["32^3-m3", "32^3-m301", "32^5-m2", "16^6-m1",
                                                  "32^4-m17", "32^4-m67"])
def test_natural_ring_kernel(gxp, rng, monkeypatch, case):
    """Every element against the float64 reference, alpha and beta applied, outputs and scratch
    from a NaN-poisoned pool; the plan takes the ring kernel where it should."""
    _natural_on(monkeypatch, True)
    shapes, m, kernels = case
    assert [k.removeprefix("f32.tf32x3.") for k in _kernels_of("float32", shapes, m)] == kernels
    k = math.prod(p for p, _ in shapes)
    _poison_pool(gxp, 3 * 4 * m * k)
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in shapes))
    x, xn = random(gxp, rng, (m, k), "float32")
    y, yn = random(gxp, rng, (m, k), "float32")
    out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced", alpha=-0.75, beta=1.5, y=y)
    ref = kron_matmul_ref(xn, fns, "right", alpha=-0.75, beta=1.5, y=yn)
    assert_close(out, ref, gxp, "float32")
    _elementwise(out, ref, gxp)


def test_natural_ring_can_be_turned_off(gxp, monkeypatch):
    """KRONLINALG_KRON_NATURAL_RING=0: the same factors in more passes of the other form."""
    _natural_on(monkeypatch, True)
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING", "0")
    assert _kernels_of("float32", [(32, 32)] * 5, 16) == ["f32.tf32x3.natural.p32"] * 3
    assert _kernels_of("float32", [(16, 16)] * 6, 16) == ["f32.tf32x3.natural.p16"] * 3
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING", "1")
    assert len(_kernels_of("float32", [(16, 16)] * 6, 16)) == 2
    # (1024 x 32^4 keeps two 2-step passes: the planner spreads the factors evenly; the column
    # pass takes the ring on tiles of 32 i, or with _RING_TI=0 only where the tile does not fit
    # the other kernel; with few tiles neither)
    assert _kernels_of("float32", [(32, 32)] * 4, 1024) == ["f32.tf32x3.natural.p32",
                                                            "f32.tf32x3.natural_ring.p32"]
    assert _kernels_of("float32", [(32, 32)] * 4, 8) == ["f32.tf32x3.natural.p32"] * 2
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING_TI", "0")
    assert _kernels_of("float32", [(32, 32)] * 4, 1024) == ["f32.tf32x3.natural.p32"] * 2


@pytest.mark.parametrize("shapes", [[(64, 64)] * 3, [(64, 64)] * 2 + [(32, 32)]],
                         ids=["64^3", "64^2-32"])
def test_natural_groups_with_unaligned_x(gxp, rng, monkeypatch, shapes):
    """One layout called with aligned and then unaligned x: the unaligned call groups the
    factors for the other kernels (more passes, two scratch buffers) and gets the scratch of
    that plan."""
    _natural_on(monkeypatch, True)
    k = math.prod(p for p, _ in shapes)
    m = 3
    fs, fns = zip(*(random(gxp, rng, s, "float32") for s in shapes))
    flat, flatn = random(gxp, rng, (m * k + 1,), "float32")
    for off in (0, 1):
        x, xn = flat[off:off + m * k].reshape(m, k), flatn[off:off + m * k].reshape(m, k)
        _poison_pool(gxp, 3 * 4 * m * k)
        out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")
        assert_close(out, kron_matmul_ref(xn, fns, "right"), gxp, "float32")


def test_prepare_sizes_scratch_per_alignment(gxp, monkeypatch):
    """A packed layout carries the scratch of both plans: 1024 x 64^3 in two natural passes (one
    buffer) with aligned x and y, in three single-factor passes (two buffers) otherwise."""
    _natural_on(monkeypatch, True)
    kc = _kron_cuda()
    m, k = 1024, 64 ** 3
    descs = [(64, 64, 64, 1)] * 3
    _, aligned, unaligned, contiguous = kc.prepare(("test-prepare", m), 1, m, descs,
                                                   (m * k, k, 1), (m * k, k, 1),
                                                   kc.DTYPES["float32"], False)
    assert aligned == (m * k, 1) and unaligned == (m * k, 2) and not contiguous


# ---------------------------------------------------------------------------------------------
# the one-pass cluster kernel (KRONLINALG_KRON_CLUSTER=1: six 8 x 8 float32 factors, each row of
# x spread over a cluster of 16 blocks, modes 0 and 1 exchanged through distributed shared memory)

CLUSTER = "f32.cluster16.8x6"


def test_cluster_kernel_is_planned(gxp, monkeypatch):
    """Only with the switch on, and only for six 8 x 8 float32 factors."""
    monkeypatch.setenv("KRONLINALG_KRON_CLUSTER", "1")
    if _kernels_of("float32", [(8, 8)] * 6, 37) != [CLUSTER]:
        pytest.skip("no room for 16-block clusters on this device (needs sm_90)")
    assert CLUSTER not in _kernels_of("float32", [(8, 8)] * 5, 37)
    assert CLUSTER not in _kernels_of("float32", [(8, 8)] * 5 + [(8, 4)], 37)
    assert CLUSTER not in _kernels_of("float64", [(8, 8)] * 6, 37)
    monkeypatch.setenv("KRONLINALG_KRON_CLUSTER", "0")
    assert CLUSTER not in _kernels_of("float32", [(8, 8)] * 6, 37)


# (lead, factor 0 transposed, x rows strided): one row (one cluster busy), more rows than
# clusters (several rows each, the next row's chunk loading during the last two modes), batch dims
@pytest.mark.parametrize("case", [((1,), False, False), ((37,), True, False),
                                  ((2, 3), False, True)], ids=["m1", "m37-Ft", "m2x3-strided"])
def test_cluster_kernel(gxp, rng, monkeypatch, case):
    monkeypatch.setenv("KRONLINALG_KRON_CLUSTER", "1")
    if _kernels_of("float32", [(8, 8)] * 6, 37) != [CLUSTER]:
        pytest.skip("no room for 16-block clusters on this device (needs sm_90)")
    lead, transposed, strided = case
    k = 8 ** 6
    for alpha, beta in [(0.75, 0.0), (-1.5, 0.5)]:
        _poison_pool(gxp, 3 * 4 * math.prod(lead) * k)
        fs, fns = zip(*(random(gxp, rng, (8, 8), "float32") for _ in range(6)))
        fs = list(fs)
        if transposed:  # (a view with column stride 8; its values are fns[0].T)
            fs[0] = fs[0].T
            fns = (fns[0].T,) + tuple(fns[1:])
        if strided:  # rows 4 elements apart from the next row's start: 16-byte aligned still
            wide, widen = random(gxp, rng, tuple(lead) + (k + 4,), "float32")
            x, xn = wide[..., :k], widen[..., :k]
        else:
            x, xn = random(gxp, rng, tuple(lead) + (k,), "float32")
        y, yn = random(gxp, rng, tuple(lead) + (k,), "float32")
        kw = {"y": y, "beta": beta} if beta else {}
        out = kronlinalg.kron_matmul(x, fs, alpha=alpha, algorithm="sliced", **kw)
        ref = kron_matmul_ref(xn, fns, "right", alpha, beta, yn if beta else None)
        assert_close(out, ref, gxp, "float32")
        _elementwise(out, ref, gxp)


# ---------------------------------------------------------------------------------------------
# the natural-order tensor-core kernels of float64 (DMMA, sm_90), float16 and bfloat16
# (kron_cuda_natural_mma.cuh): the float32 kernel's tiles and steps in each storage type

MMA_NATURAL_DTYPES = ["float64", "float16", "bfloat16"]
MMA_NATURAL_NAME = {"float64": "f64.dmma", "float16": "f16.mma", "bfloat16": "bf16.mma"}


def _cc_major(gxp):
    if gxp.is_torch:
        return gxp.module.cuda.get_device_capability()[0]
    return int(gxp.module.cuda.Device().compute_capability) // 10


def _need_mma_natural(gxp, dtype):
    _need(gxp, dtype)
    if dtype == "float64" and _cc_major(gxp) < 9:
        pytest.skip("float64 takes DMMA m16n8k8 on sm_90 and newer only")


def _rtol_of(dtype):
    # (the half types: each step's results round to half, inputs drawn in half)
    return {"float64": 1e-12, "float16": 4e-3, "bfloat16": 2e-2}[dtype]


def _factors(gxp, rng, shapes, dtype):
    """(factors in gxp, their float64 values): float16 factors scaled by a power of two near
    1 / sqrt(P), exactly, so that long chains stay finite (standard-normal 8 x 8 factors take
    3 x 8^7 past float16's 65504 with alpha = -1.5 for about one seed in six, any plan; 32^5
    and 16^6 always)."""
    fs, fns = zip(*(random(gxp, rng, s, dtype) for s in shapes))
    if dtype != "float16":
        return fs, fns
    fns = [f * 2.0 ** -math.ceil(math.log2(math.sqrt(s[0]))) for f, s in zip(fns, shapes)]
    return [to_xp(gxp, f, dtype) for f in fns], fns


@pytest.mark.parametrize("dtype", MMA_NATURAL_DTYPES)
@pytest.mark.parametrize("case", NATURAL_CASES,
                         ids=lambda c: "-".join(f"{p}x{q}" for p, q in c[0]) + f"-m{c[1]}")
def test_mma_natural_kernel(gxp, rng, monkeypatch, dtype, case):
    """Every P, line and column tiles, one to three steps, partial tiles, several passes, alpha
    and beta, outputs and scratch from a NaN-poisoned pool, against the float64 reference."""
    _need_mma_natural(gxp, dtype)
    _natural_on(monkeypatch, True)
    shapes, lead = case
    k = math.prod(p for p, _ in shapes)
    size = 3 * 8 * math.prod(lead) * k
    for alpha, beta in [(0.75, 0.0), (-1.5, 0.5)]:
        _poison_pool(gxp, min(size, 1 << 28))
        fs, fns = _factors(gxp, rng, shapes, dtype)
        x, xn = random(gxp, rng, tuple(lead) + (k,), dtype)
        y, yn = random(gxp, rng, tuple(lead) + (math.prod(q for _, q in shapes),), dtype)
        kw = {"y": y, "beta": beta} if beta else {}
        out = kronlinalg.kron_matmul(x, list(fs), alpha=alpha, algorithm="sliced", **kw)
        ref = kron_matmul_ref(xn, fns, "right", alpha, beta, yn if beta else None)
        assert_close(out, ref, gxp, dtype, rtol=_rtol_of(dtype))
        _elementwise(out, ref, gxp, rtol=10 * _rtol_of(dtype))


@pytest.mark.parametrize("dtype", MMA_NATURAL_DTYPES)
def test_mma_natural_kernel_is_planned(gxp, monkeypatch, dtype):
    """Groups of P x P factors take the natural-order kernel of their dtype; P = 8 from two
    steps; none where it is off, or for factors it does not take."""
    _need_mma_natural(gxp, dtype)
    _natural_on(monkeypatch, True)
    name = MMA_NATURAL_NAME[dtype]

    def kernels(shapes, m):  # (the half types' column passes may take its ring form)
        return {k.replace("natural_ring", "natural") for k in _kernels_of(dtype, shapes, m)}

    assert kernels([(16, 16)] * 5, 1024) == {f"{name}.natural.p16"}
    assert kernels([(32, 32)] * 4, 1024) == {f"{name}.natural.p32"}
    assert kernels([(64, 64)] * 3, 1024) == {f"{name}.natural.p64"}
    assert _kernels_of(dtype, [(8, 8)] * 6, 1024)[0] == f"{name}.natural.p8"
    assert not any("natural" in k for k in _kernels_of(dtype, [(24, 24)] * 2, 64))
    _natural_on(monkeypatch, False)
    assert not any("natural" in k for k in _kernels_of(dtype, [(32, 32)] * 4, 1024))


@pytest.mark.parametrize("dtype", MMA_NATURAL_DTYPES)
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("shapes,m", [
    ([(32, 32)] * 2, 3203),
    ([(16, 16)] * 3, 2001),
    ([(8, 8)] * 3, 2001),
    ([(64, 64)] * 2, 701),           # two column groups, results through the second buffer
    ([(32, 32)] * 2 + [(1, 8)], 1999),   # column tiles of 8 i
], ids=["32^2", "16^3", "8^3", "64^2", "32^2-cols"])
def test_mma_natural_kernel_many_tiles_per_block(gxp, rng, monkeypatch, dtype, stages, shapes, m):
    """Persistent blocks over many tiles with the next tiles' loads in flight: every element."""
    _need_mma_natural(gxp, dtype)
    _natural_on(monkeypatch, True)
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_STAGES", str(stages))
    k = math.prod(p for p, _ in shapes)
    _poison_pool(gxp, min(3 * 8 * m * k, 1 << 28))
    fs, fns = _factors(gxp, rng, shapes, dtype)
    x, xn = random(gxp, rng, (m, k), dtype)
    out = kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")
    ref = kron_matmul_ref(xn, fns, "right")
    assert_close(out, ref, gxp, dtype, rtol=_rtol_of(dtype))
    _elementwise(out, ref, gxp, rtol=10 * _rtol_of(dtype))


@pytest.mark.parametrize("dtype", MMA_NATURAL_DTYPES)
def test_mma_natural_kernel_matches_the_other_kernels(gxp, rng, monkeypatch, dtype):
    """The same product on the natural-order kernel and on the sliced kernels."""
    _need_mma_natural(gxp, dtype)
    shapes = [(16, 16)] * 4
    fs, fns = zip(*(random(gxp, rng, s, dtype) for s in shapes))
    x, xn = random(gxp, rng, (37, 16 ** 4), dtype)
    ref = kron_matmul_ref(xn, fns, "right")
    outs = []
    for on in (True, False):
        _natural_on(monkeypatch, on)
        outs.append(to_numpy(kronlinalg.kron_matmul(x, list(fs), algorithm="sliced")))
    a, b = (o.astype(np.float64) for o in outs)
    tol = _rtol_of(dtype)
    assert np.linalg.norm(a - ref) <= tol * np.linalg.norm(ref)
    assert np.linalg.norm(b - ref) <= tol * np.linalg.norm(ref)
    assert np.linalg.norm(a - b) <= 2 * tol * np.linalg.norm(ref)




def _passes_of(dtype, shapes, m):
    """(kernel, L, threads) of each pass of a contiguous x @ kron plan (L: lines or i a tile)."""
    kc = _kron_cuda()
    k = math.prod(p for p, _ in shapes)
    nq = math.prod(q for _, q in shapes)
    descs = [(0, p, q, q, 1) for p, q in shapes]
    text = kc.config(1, m, descs, (256, m * k, k, 1), (256, m * nq, nq, 1), kc.DTYPES[dtype])
    return [(name, int(L), int(t)) for name, L, t in
            re.findall(r"kernel=(\S+) L=(\d+)\S* threads=(\d+)", text)]


def _check_every_element(gxp, rng, shapes, m, dtype, alpha=1.0, beta=0.0):
    """x @ kron from a NaN-poisoned pool against the float64 reference, every element."""
    k = math.prod(p for p, _ in shapes)
    nq = math.prod(q for _, q in shapes)
    _poison_pool(gxp, min(3 * 8 * m * k, 1 << 28))
    fs, fns = _factors(gxp, rng, shapes, dtype)
    x, xn = random(gxp, rng, (m, k), dtype)
    y, yn = random(gxp, rng, (m, nq), dtype)
    kw = {"y": y, "beta": beta} if beta else {}
    out = kronlinalg.kron_matmul(x, list(fs), alpha=alpha, algorithm="sliced", **kw)
    ref = kron_matmul_ref(xn, fns, "right", alpha, beta, yn if beta else None)
    assert_close(out, ref, gxp, dtype, rtol=_rtol_of(dtype))
    _elementwise(out, ref, gxp, rtol=10 * _rtol_of(dtype))


@pytest.mark.parametrize("warps", [0, 4])
@pytest.mark.parametrize("shapes,m", [
    ([(8, 8)] * 3, 21),                  # one 3-step line pass
    ([(8, 8)] * 6, 5),                   # 3 + 3: a 3-step column pass
    ([(8, 8)] * 5, 3),                   # 3 + 2: a 2-step column pass
], ids=["8^3", "8^6", "8^5"])
def test_mma_natural_float64_p8_tiles(gxp, rng, monkeypatch, warps, shapes, m):
    """float64 P = 8: blocks of 8 warps and column tiles of 16 i by default (4 warps on the
    knob), line and column passes, alpha and beta, every element."""
    _need_mma_natural(gxp, "float64")
    _natural_on(monkeypatch, True)
    if warps:
        monkeypatch.setenv("KRONLINALG_KRON_NATURAL_WARPS", str(warps))
    natural = [p for p in _passes_of("float64", shapes, m) if "natural" in p[0]]
    assert natural and all(t == 32 * (warps or 8) for _, _, t in natural), natural
    if shapes == [(8, 8)] * 6:
        assert natural[1][1] == 16, natural   # the column pass: tiles of 16 i
    for alpha, beta in [(0.75, 0.0), (-1.5, 0.5)]:
        _check_every_element(gxp, rng, shapes, m, "float64", alpha, beta)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shapes,m,lines", [
    ([(32, 32)] * 2, 9, [8]),            # line tiles of 8 lines, the second partial
    ([(32, 32)] * 5, 2, [8, 16, 128]),   # 2 + 2 + 1: the 3-step line group does not fit
], ids=["32^2", "32^5"])
def test_mma_natural_half_p32_line_tiles(gxp, rng, monkeypatch, dtype, shapes, m, lines):
    """The half types' P = 32 groups of two or more on line tiles of 8 lines (without the ring
    kernel, which takes 32^5's 3-step line group)."""
    _need_mma_natural(gxp, dtype)
    _natural_on(monkeypatch, True)
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING_HALF", "0")
    _kron_cuda().tune()  # (no replay of a plan made under the other setting)
    plan = _passes_of(dtype, shapes, m)
    assert [L for _, L, _ in plan] == lines, plan
    for alpha, beta in [(0.75, 0.0), (-1.5, 0.5)]:
        _check_every_element(gxp, rng, shapes, m, dtype, alpha, beta)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mma_natural_half_ring_is_planned(gxp, monkeypatch, dtype):
    """The half types' ring kernel takes the groups no other tile fits (the float32 grouping:
    32^5 in 3 + 2, 16^6 in 3 + 3, 16^4 in one 4-step pass) with
    KRONLINALG_KRON_NATURAL_RING_HALF=1, P = 32 column groups on 64 i with 2 (or _RING_TI i),
    P = 16 ones too with 3 (the default; its P = 16 line tiles hold 4 lines), none with 0 or
    _RING=0."""
    _need_mma_natural(gxp, dtype)
    _natural_on(monkeypatch, True)
    name = MMA_NATURAL_NAME[dtype]
    monkeypatch.delenv("KRONLINALG_KRON_NATURAL_RING_HALF", raising=False)
    assert _kernels_of(dtype, [(32, 32)] * 4, 1024) == [f"{name}.natural.p32",
                                                        f"{name}.natural_ring.p32"]
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING_HALF", "1")
    assert _kernels_of(dtype, [(32, 32)] * 5, 16) == [f"{name}.natural_ring.p32",
                                                      f"{name}.natural.p32"]
    assert _kernels_of(dtype, [(16, 16)] * 6, 16) == [f"{name}.natural.p16",
                                                      f"{name}.natural_ring.p16"]
    assert _kernels_of(dtype, [(16, 16)] * 4, 5) == [f"{name}.natural_ring.p16"]
    assert _kernels_of(dtype, [(32, 32)] * 4, 1024) == [f"{name}.natural.p32"] * 2
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING_HALF", "2")
    assert _kernels_of(dtype, [(32, 32)] * 4, 1024) == [f"{name}.natural.p32",
                                                        f"{name}.natural_ring.p32"]
    assert [L for _, L, _ in _passes_of(dtype, [(32, 32)] * 4, 1024)] == [8, 64]
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING_TI", "32")
    assert [L for _, L, _ in _passes_of(dtype, [(32, 32)] * 4, 1024)] == [8, 32]
    assert _kernels_of(dtype, [(32, 32)] * 4, 8) == [f"{name}.natural.p32"] * 2
    assert _kernels_of(dtype, [(16, 16)] * 5, 1024) == [f"{name}.natural.p16"] * 2
    monkeypatch.delenv("KRONLINALG_KRON_NATURAL_RING_TI")
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING_HALF", "3")
    assert [(k.split(".")[-2], L) for k, L, _ in _passes_of(dtype, [(16, 16)] * 5, 1024)] == [
        ("natural", 4), ("natural_ring", 64)]
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING_HALF", "0")
    assert len(_kernels_of(dtype, [(32, 32)] * 5, 16)) == 3
    assert not any("ring" in k for k in _kernels_of(dtype, [(16, 16)] * 6, 16))
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING_HALF", "1")
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING", "0")
    assert not any("ring" in k for k in _kernels_of(dtype, [(16, 16)] * 6, 16))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shapes,m,ring", [
    ([(32, 32)] * 5, 2, "1"),            # a 3-step line ring pass (one line of 32^3 a tile)
    ([(32, 32)] * 3, 301, "1"),          # the same alone, blocks of several tiles: the ring
    ([(16, 16)] * 4, 299, "1"),          # wraps; one 4-step line ring pass (128 KB lines)
    ([(16, 16)] * 6, 1, "1"),            # 3 + 3: a 3-step column ring pass of 16 i
    ([(32, 32)] * 4, 40, "2"),           # 2 + 2, the column pass on the ring at 64 i
    ([(16, 16)] * 5, 9, "3"),            # 3 + 2, the column pass on the ring at 64 i
], ids=["32^5", "32^3", "16^4", "16^6", "32^4-cols64", "16^5-cols64"])
def test_mma_natural_half_ring(gxp, rng, monkeypatch, dtype, shapes, m, ring):
    """The half types' ring kernel (kron_cuda_natural_mma_ring.cuh): line and column tiles,
    alpha and beta, every element from a NaN-poisoned pool, against the float64 reference."""
    _need_mma_natural(gxp, dtype)
    _natural_on(monkeypatch, True)
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_RING_HALF", ring)
    _kron_cuda().tune()
    assert any("natural_ring" in k for k in _kernels_of(dtype, shapes, m))
    for alpha, beta in [(0.75, 0.0), (-1.5, 0.5)]:
        _check_every_element(gxp, rng, shapes, m, dtype, alpha, beta)


@pytest.mark.parametrize("dtype", MMA_NATURAL_DTYPES)
@pytest.mark.parametrize("m", [1, 3])
def test_mma_natural_shorter_groups(gxp, rng, monkeypatch, dtype, m):
    """8^7 in 3 + 2 + 2 natural steps (a middle pass with modes on both sides), not a 4-factor
    sliced pass: the half types by default, float64 with KRONLINALG_KRON_NATURAL_SHORTER=1;
    every element from a poisoned pool."""
    _need_mma_natural(gxp, dtype)
    _natural_on(monkeypatch, True)
    shapes = [(8, 8)] * 7
    name = MMA_NATURAL_NAME[dtype]
    if dtype == "float64":
        assert "natural" not in _kernels_of(dtype, shapes, m)[0]
        monkeypatch.setenv("KRONLINALG_KRON_NATURAL_SHORTER", "1")
    assert _kernels_of(dtype, shapes, m) == [f"{name}.natural.p8"] * 3
    for alpha, beta in [(0.75, 0.0), (-1.5, 0.5)]:
        _check_every_element(gxp, rng, shapes, m, dtype, alpha, beta)
    monkeypatch.setenv("KRONLINALG_KRON_NATURAL_SHORTER", "0")
    assert "natural" not in _kernels_of(dtype, shapes, m)[0]
