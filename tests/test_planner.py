"""The cost model and planner: KAMI's worked examples, plan()/explain(), profiles, the
calibration cache, and algorithm='auto' through the planner.  GPU probes run with -m gpu."""

from __future__ import annotations

import io
import json
import math
import timeit

import numpy as np
import pytest

import kronlinalg
from kronlinalg import planner
from kronlinalg.planner import profile_cache
from kronlinalg.planner import calibration
from kronlinalg.planner.costs import kron
from kronlinalg.planner import ranking
from kronlinalg.planner import profiles
from kronlinalg.planner import registry

from _helpers import assert_close, kron_matmul_ref, random

# ---------------------------------------------------------------------------------------------
# KAMI's cycle formulas: the paper's worked numbers (GH200 figures, FP64, 8×8×8)

PAPER = dict(s_e=8, L_sm=22, B_sm=128, theta_r=1, theta_w=1, O_tc=32, n_tc=4)


def test_kami_1d_worked_example():
    r = planner.kami_1d(8, 8, 8, 2, **PAPER)
    assert (r.V_cm, r.T_cm, r.T_cp, r.T_all) == (512, 26, 8, 60)


def test_kami_2d_worked_example():
    r = planner.kami_2d(8, 8, 8, 4, **PAPER)
    assert (r.V_cm, r.T_cm, r.T_cp, r.T_all) == (1024, 30, 8, 68)


def test_kami_3d_worked_example():
    r = planner.kami_3d(8, 8, 8, 8, **PAPER)
    assert (r.T_cm, r.T_all) == (30, 68)


def test_kami_positional_order_and_dispatch():
    # (m, n, k, p, s_e, L_sm, B_sm, θr, θw, O_tc, n_tc), as DESIGN §3 lists them
    assert planner.kami_1d(8, 8, 8, 2, 8, 22, 128, 1, 1, 32, 4).T_all == 60
    assert planner.kami(2, 8, 8, 8, 4, **PAPER) == planner.kami_2d(8, 8, 8, 4, **PAPER)
    with pytest.raises(ValueError, match="dims"):
        planner.kami(4, 8, 8, 8, 4, **PAPER)


def test_kami_bank_conflicts_slow_communication_only():
    clean = planner.kami_1d(16, 16, 16, 4, **PAPER)
    conflicted = planner.kami_1d(16, 16, 16, 4, **{**PAPER, "theta_r": 0.5})
    assert conflicted.T_cp == clean.T_cp
    # (p - 1) reads of V_cm at half the bandwidth
    assert conflicted.T_all - clean.T_all == pytest.approx(3 * clean.V_cm / 128)


# ---------------------------------------------------------------------------------------------
# MSMES and roofline


def test_msmes_level_is_max_of_its_terms():
    params = dict(tau=50e12, gmem_bw=3e12, smem_bw=33e12, s_e=4)
    terms = planner.msmes_level(4096, **params)
    assert terms.T == max(terms.T_flop, terms.T_gmem, terms.T_smem)
    assert terms.T_flop == pytest.approx((7 * 4096**3 / 4 + 7 * 4096**2) / 50e12)
    assert planner.msmes_time(4096, 0, **params) == pytest.approx(2 * 4096**3 / 50e12)
    # a second level does 7 subproblems of half size: still fewer flops than one level
    assert planner.msmes_time(4096, 2, **params) < planner.msmes_time(4096, 1, **params)
    with pytest.raises(ValueError, match="levels"):
        planner.msmes_time(64, -1, **params)


def test_roofline_picks_the_binding_resource():
    assert planner.roofline(1e12, 1e6, 1e12, 1e12) == pytest.approx(1.0)
    assert planner.roofline(1e3, 2e12, 1e12, 1e12, overhead=1.0) == pytest.approx(3.0)


# ---------------------------------------------------------------------------------------------
# plan() and explain()


@pytest.fixture
def fresh_planner(tmp_path, monkeypatch):
    """An empty calibration cache and no remembered profiles or plans, before and after."""
    monkeypatch.setenv("KRONLINALG_CACHE_DIR", str(tmp_path / "cache"))
    profiles.invalidate()
    planner.clear_cache()
    yield tmp_path / "cache"
    profiles.invalidate()
    planner.clear_cache()


KRON_SHAPES = ((64, 256), (16, 16), (16, 16))


def test_plan_ranks_cpu_candidates(fresh_planner):
    choices = planner.plan("kron_matmul", *KRON_SHAPES, dtype="float32", device="cpu")
    assert {c.name for c in choices} == {"sliced", "shuffle"}
    times = [c.seconds for c in choices]
    assert times == sorted(times) and all(t > 0 for t in times)
    for c in choices:
        assert c.details["family"] == f"kron_matmul/{c.name}/cpu"
        assert sum(c.details["terms"].values()) == pytest.approx(c.seconds)


def test_plan_forced_algorithm(fresh_planner):
    (only,) = planner.plan("kron_matmul", *KRON_SHAPES, dtype="float64", algorithm="shuffle")
    assert only.name == "shuffle" and only.details["forced"]
    with pytest.raises(ValueError, match="algorithm"):
        planner.plan("kron_matmul", *KRON_SHAPES, algorithm="no-such-algorithm")


def test_plan_bad_arguments_name_the_argument(fresh_planner):
    with pytest.raises(ValueError, match="op"):
        planner.plan("no_such_op", (2, 2))
    with pytest.raises(ValueError, match="shapes"):
        planner.plan("kron_matmul", (4, 15), (4, 4), (4, 4))
    with pytest.raises(ValueError, match="shapes"):
        planner.plan("matmul", (4, 3), (4, 5))
    with pytest.raises(ValueError, match="side"):
        planner.plan("kron_matmul", *KRON_SHAPES, side="middle")
    with pytest.raises(ValueError, match="device"):
        planner.plan("kron_matmul", *KRON_SHAPES, device="tpu")


def test_plan_left_side_reads_transposed_factors(fresh_planner):
    # (F1 ⊗ F2) @ x with F_i of shape 3×5: x has prod(Q) = 25 rows, the result prod(P) = 9
    info = kron.normalise(((25, 7), (3, 5), (3, 5)), {"side": "left"})
    assert info["M"] == 7 and info["factors"] == [(5, 3), (5, 3)]
    assert info["lengths"] == [25, 15, 9]
    assert planner.plan("kron_matmul", (25, 7), (3, 5), (3, 5), side="left")


def test_plan_passes_match_the_cpu_kernel(fresh_planner):
    from kronlinalg.testing import extension
    kron_cpu = extension("kron_cpu")

    for m, factors in [(64, [(8, 8)] * 6), (3, [(128, 128)] * 2), (1, [(2, 3), (5, 4), (7, 7)])]:
        x = (m, math.prod(p for p, _ in factors))
        ch = planner.plan("kron_matmul", x, *factors, dtype="float32", algorithm="sliced")[0]
        descs = [(1, p, q, q, 1) for p, q in factors]
        assert ch.details["passes"] == kron_cpu.passes(1, m, descs, 0)


def test_plan_for_a_table_gpu_without_one(fresh_planner):
    choices = planner.plan("kron_matmul", (1024, 8**5), *[(8, 8)] * 5, dtype="float32",
                           device="h100-sxm")
    assert {c.details["family"] for c in choices} == {"kron_matmul/sliced/cuda",
                                                      "kron_matmul/shuffle/cuda"}
    (lib,) = planner.plan("matmul", (4096, 4096), (4096, 4096), dtype="float64",
                          device="h100-sxm")
    # DGEMM at 8192 measured 57 TFLOP/s on the H100: 4096³ is compute-bound at that rate
    assert lib.seconds == pytest.approx(2 * 4096**3 / 57e12, rel=0.1)


def test_matmul_shapes_follow_array_api(fresh_planner):
    info = registry.normalise("matmul", ((5, 1, 3, 4), (7, 4, 6)), {})
    assert (info["batch"], info["m"], info["k"], info["n"]) == (35, 3, 4, 6)
    info = registry.normalise("matmul", ((4,), (4,)), {})
    assert (info["m"], info["k"], info["n"]) == (1, 4, 1)


def test_register_a_candidate(fresh_planner, monkeypatch):
    monkeypatch.setitem(registry._CANDIDATES, "matmul", list(registry._CANDIDATES["matmul"]))
    planner.register("matmul", planner.Candidate("oracle", lambda problem, prof: 1e-9,
                                                 devices=("cpu",)))
    choices = planner.plan("matmul", (64, 64), (64, 64))
    assert [c.name for c in choices] == ["oracle", "library"]
    with pytest.raises(ValueError, match="op"):
        planner.register("no_such_op", planner.Candidate("x", lambda p, q: 0.0))


def test_explain_prints_a_table(fresh_planner, capsys):
    assert planner.explain("kron_matmul", *KRON_SHAPES, dtype="float32") is None
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert "kron_matmul 64x256 16x16 16x16 float32 on cpu" in lines[0]
    assert "candidate" in lines[1] and "predicted" in lines[1]
    assert lines[2].startswith("*") and len(lines) == 4
    text = kronlinalg.explain("kron_matmul", *KRON_SHAPES, dtype="float32", file=None)
    assert text.strip() == out.strip()
    buf = io.StringIO()
    kronlinalg.explain("matmul", (8, 8), (8, 8), file=buf)
    assert "library" in buf.getvalue()


def test_repeat_plan_is_a_cache_hit(fresh_planner):
    args = ("kron_matmul", (256, 4096), (16, 16), (16, 16), (16, 16))
    first = planner.plan(*args, dtype="float32")
    assert planner.plan(*args, dtype="float32") == first
    assert planner.plan(*args, dtype=np.float32) == first  # dtype objects work too
    assert planner.plan("kron_matmul", [256, 4096], *[[16, 16]] * 3, dtype="float32") == first
    n = 20000
    per_call = timeit.timeit(lambda: planner.plan(*args, dtype="float32"), number=n) / n
    x = np.ones((256, 4096), np.float32)
    per_choose = timeit.timeit(
        lambda: planner.choose(*args, dtype="float32", device=x, side="right"), number=n) / n
    # reported, not asserted: timing on shared CI machines is not a correctness property
    print(f"\nplanning overhead per cached call: plan() {per_call * 1e6:.2f} µs, "
          f"choose(device=array) {per_choose * 1e6:.2f} µs")


# ---------------------------------------------------------------------------------------------
# profiles and the calibration cache


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KRONLINALG_CACHE_DIR", str(tmp_path / "kl"))
    assert profile_cache.cache_dir() == tmp_path / "kl"
    monkeypatch.delenv("KRONLINALG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert profile_cache.cache_dir() == tmp_path / "xdg" / "kronlinalg"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert profile_cache.cache_dir() == tmp_path / "home" / ".cache" / "kronlinalg"


def test_cache_ignores_foreign_or_broken_files(fresh_planner):
    path = profile_cache.store("dev-a", {"bandwidth": 1.0e10})  # (a plausible value)
    assert profile_cache.load("dev-a")["bandwidth"] == 1.0e10
    path.write_text("{not json")
    assert profile_cache.load("dev-a") is None
    path.write_text(json.dumps({"schema": -1, "key": "dev-a"}))
    assert profile_cache.load("dev-a") is None


def test_cpu_calibration_writes_and_reloads(fresh_planner, monkeypatch):
    prof = kronlinalg.calibrate("cpu", force=True, quick=True)
    assert prof.source == "calibrated" and prof.kind == "cpu"
    assert prof.bandwidth > 0 and prof.gemm_flops["float64"] > 0
    (path,) = fresh_planner.glob("profile-cpu-*.json")
    stored = json.loads(path.read_text())
    assert stored["bandwidth"] == pytest.approx(prof.bandwidth)
    # a new process (simulated: forget every profile) reads the file instead of measuring
    profiles.invalidate()
    monkeypatch.setattr(calibration, "measure_cpu", lambda quick: pytest.fail("re-measured"))
    again = kronlinalg.calibrate("cpu")
    assert again.bandwidth == pytest.approx(prof.bandwidth)
    assert profiles.profile_for("cpu").source == "calibrated"


def test_stored_coefficients_change_predictions(fresh_planner):
    before = planner.plan("kron_matmul", *KRON_SHAPES, dtype="float32", algorithm="shuffle")
    calibration.store_coefficients("cpu", {"kron_matmul/shuffle/cpu": {"gemm_flop": 1e3}})
    after = planner.plan("kron_matmul", *KRON_SHAPES, dtype="float32", algorithm="shuffle")
    assert after[0].seconds > before[0].seconds
    assert profiles.profile_for("cpu").source != "calibrated"  # coefficients are not a calibration


def test_known_gpus_and_device_names():
    h100 = planner.KNOWN_GPUS["h100-sxm"]
    assert (h100.units, h100.bandwidth, h100.gemm_flops["float64"]) == (132, 2.96e12, 57e12)
    assert profiles.table_row("NVIDIA H100 80GB HBM3", (9, 0), 132) is h100
    assert profiles.table_row("NVIDIA H100 PCIe", (9, 0), 114).units == 114
    assert profiles.table_row("Some Future GPU", (8, 0), 108).name == "NVIDIA A100"
    assert profiles.table_row("Some Future GPU", (12, 0), 7) is None
    assert profiles.resolve_device("cuda:1") == "cuda:1"
    assert profiles.resolve_device(2) == "cuda:2"
    assert profiles.resolve_device(np.ones(3)) == "cpu"
    assert profiles.resolve_device(None) == "cpu"


# ---------------------------------------------------------------------------------------------
# algorithm="auto" runs the planner's pick and stays correct


AUTO_CASES = [
    ((6, 64), [(4, 4), (4, 4), (4, 4)], "right"),
    ((2, 3, 30), [(5, 2), (6, 3)], "right"),
    ((1, 128 * 2), [(128, 64), (2, 2)], "right"),
    ((4 * 3, 5), [(2, 4), (2, 3)], "left"),
    ((7,), [(7, 3)], "right"),
]


@pytest.mark.parametrize("xshape,fshapes,side", AUTO_CASES)
def test_auto_is_correct(xp, rng, xshape, fshapes, side, fresh_planner):
    for dtype in xp.dtypes:
        if dtype not in ("float32", "float64"):
            continue
        x, x64 = random(xp, rng, xshape, dtype)
        fs = [random(xp, rng, s, dtype) for s in fshapes]
        got = kronlinalg.kron_matmul(x, [f for f, _ in fs], side=side, algorithm="auto")
        want = kron_matmul_ref(x64, [f for _, f in fs], side=side)
        assert_close(got, want, xp, dtype)


def test_auto_follows_the_plan(fresh_planner, monkeypatch):
    seen = []
    real = ranking.plan

    def spy(*args, **kwargs):
        seen.append(real(*args, **kwargs)[0].name)
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "plan", spy)
    x = np.ones((3, 16))
    kronlinalg.kron_matmul(x, [np.eye(4), np.eye(4)])
    assert seen and seen[0] in ("sliced", "shuffle")


# ---------------------------------------------------------------------------------------------
# GPU: the clock64() probes and a GPU calibration


def _probe():
    from kronlinalg.testing import extension
    probe_cuda = extension("probe_cuda")

    if probe_cuda is None:
        pytest.skip("built without CUDA")
    return probe_cuda


@pytest.mark.gpu
def test_probe_smem_latency_and_bandwidth():
    probe = _probe()
    lat = probe.smem_latency(4096)
    L_sm = lat["cycles"] / lat["loads"]
    assert 5 < L_sm < 200, L_sm
    one = probe.smem_bandwidth(stride=1)
    B_sm = one["bytes"] / one["cycles"]
    assert 16 < B_sm <= 256, B_sm
    worst = probe.smem_bandwidth(stride=32)
    assert worst["cycles"] > 4 * one["cycles"]  # 32-way conflicts
    print(f"\nL_sm = {L_sm:.1f} cycles, B_sm = {B_sm:.1f} B/cycle/SM "
          f"(KAMI's GH200 example: 22, 128)")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["fp16", "bf16", "tf32", "fp64"])
def test_probe_mma_rates(kind):
    r = _probe().mma(kind)
    rate = r["ops"] / r["cycles"]
    assert 16 < rate < 16384, rate
    print(f"\n{kind} mma.sync: {rate:.0f} ops/cycle/SM")


@pytest.mark.gpu
def test_probe_rejects_bad_arguments():
    probe = _probe()
    with pytest.raises(RuntimeError, match="warps"):
        probe.smem_bandwidth(stride=1, warps=64)
    with pytest.raises(ValueError, match="kind"):
        probe.mma("int4")


@pytest.mark.gpu
def test_gpu_calibration(fresh_planner):
    pytest.importorskip("cupy")
    prof = kronlinalg.calibrate("cuda", force=True, quick=True)
    assert prof.kind == "cuda" and prof.source == "calibrated"
    assert prof.L_sm > 0 and prof.B_sm > 0 and prof.theta[32] < prof.theta[1]
    assert prof.bandwidth > 1e11 and prof.gemm_flops["float32"] > 1e12
    (path,) = fresh_planner.glob("profile-cuda-*.json")
    raw = json.loads(path.read_text())["raw"]
    assert raw["smem_latency"]["loads"] > 0
    assert set(raw["mma"]) == {"fp16", "bf16", "tf32", "fp64"}
    choices = planner.plan("kron_matmul", *KRON_SHAPES, dtype="float32", device="cuda")
    assert {c.name for c in choices} == {"sliced", "shuffle"}


def test_planning_for_cuda_without_a_gpu_names_the_way_out():
    """No usable GPU: a clear RuntimeError pointing at the named profiles, never a library's
    internal assertion."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:  # no CuPy, or no driver
        pass
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    kronlinalg.planner.clear_cache()
    with pytest.raises(RuntimeError, match="no GPU .*device='h100-sxm'"):
        kronlinalg.plan("kron_matmul", (4, 64), (8, 8), (8, 8), dtype="float32", device="cuda")
