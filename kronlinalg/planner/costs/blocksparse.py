"""Predictors of the block-sparse products (spmm, spgemm): ours (the row-order kernels), torch's
BSR, and dense GEMM on the densified matrix.

The problem's info (filled by kronlinalg/blocksparse.py's normalise) carries the sizes, the
block size b, the stored blocks, the density, the row skew (largest block row over the mean),
the right-hand-side tile the CUDA kernel takes for these sizes (asked of the kernel) and the
array library.  Terms:

- ours, CUDA: max(tensor-core time, DRAM time, L2 time) + launch, with an imbalance factor
  from the skew.  Every stored block is read once per right-hand-side tile; every block
  stages its B rows (b x tile) from L2; tensor cores at a fraction of peak (mma.sync from
  shared memory: ~45 % for FP16, 3 products for 3xTF32, DMMA ~60 %).
- ours, CPU: the vectorised loop reaches about a quarter of the BLAS rate per flop.
- ours 2D (panels of 4 or 8 block rows): fitted costs per step (a block column present in a
  panel) and per block, the step count from the pattern's reuse (blocks per step) when known;
  the L2 bytes (one B block row per step), DRAM and the tensor cores bound it from below.
- torch BSR: our time times the measured ratio.
- dense: the library's GEMM on m x k x n (roofline), plus densifying A once.
"""

from __future__ import annotations

import math

from ...common.dtypes import ITEMSIZE
from ..roofline import roofline

__all__ = ["predict_spmm_ours", "predict_spmm_morton", "predict_spmm_dense", "panel_rows",
           "predict_spmm_torch_bsr",
           "predict_spgemm_ours", "predict_spgemm_dense", "tc_rate",
           "predict_batched_ours", "predict_batched_gather", "predict_batched_dense"]

# Fitted to the H100 runs of 2026-11-26 (docs/blocksparse.md; timed as loops of calls): the 1D
# kernels moved 4.4-5.9 TB/s from L2 into shared memory (B block rows staged per block: on
# random patterns that traffic, not DRAM or the tensor cores, bounds them), ~10 us a call
# beyond its traffic plus ~15 us of Python for one call; torch.mm on the kept dense matrix
# ~10 us beyond cuBLAS's roofline.
_HOST_OURS = 15e-6
_HOST_DENSE = 10e-6
_L2_FACTOR = 1.6  # L2 -> shared memory bandwidth over DRAM bandwidth (4.7 TB/s on the H100)
_BSR_OVER_OURS = 2.5  # torch BSR / ours, measured 1.9-7.0x
# The 2D kernel: its time is its steps (one per block column present in a panel: a staged B
# block row) and blocks, at ns per CTA step / per block over the whole GPU (H100, 132 SMs),
# fitted per (dtype class, panel rows) by least squares to the launches' times of the H100 run
# of 2026-11-27 (benchmarks/blocksparse_morton.py + _fit.py; 39 cases: random, banded,
# block-diagonal + noise, power-law, N = 4096 / 16384, RHS 64-4096), in the 1D model's units
# (each 2D time scaled by the 1D prediction over the 1D measurement, so the pick follows the
# measured ratio where the 1D model is off): the planner then picks the faster in 39 of 39.
# The L2 -> shared memory bytes (a B block row per step, not per block) bound it from below.
_2D_STEP_NS = {("half", 8): 2.460, ("half", 4): 1.782, ("float32", 8): 2.893,
               ("float32", 4): 1.554, ("float64", 4): 2.660}
_2D_BLOCK_NS = {("half", 8): 0.144, ("half", 4): 0.0, ("float32", 8): 1.112,
                ("float32", 4): 0.846, ("float64", 4): 2.678}
_H100_SMS = 132
# spmm's whole Python path for the 2D kernel (no per-signature fast path, unlike the 1D's):
# loops of calls ran at ~0.1 ms a call whatever the kernel's length (0.064-0.106 ms where the
# kernel took 0.010-0.051), so a call costs at least that
_HOST_2D = 100e-6
# ... and against the 1D kernel's prediction, the 2D kernel's measured time ran 1.10-1.39x what
# the model says (10 cases within 25 % of the 1D's, the same run; mean 1.24): it is charged
# that, so auto takes it only where it predicts a clear gain (the one it took and lost,
# block-diagonal + noise FP64 at 256 columns, 1.15x the 1D's time, it no longer takes)
_2D_OVER_MODEL = 1.24
_EFF = {"float16": 0.45, "bfloat16": 0.45, "float32": 0.5, "float64": 0.6}


def tc_rate(prof, dtype: str) -> float:
    """Flop/s our tensor-core tiles reach in dtype (FP32: 3xTF32, a third of the TF32 rate)."""
    ops = prof.tc_ops or {}
    key = {"float16": "fp16", "bfloat16": "bf16", "float32": "tf32", "float64": "fp64"}[dtype]
    per_sm = ops.get(key)
    if not per_sm:
        return prof.flops(dtype) * 0.5
    rate = per_sm * prof.units * prof.clock_hz * _EFF[dtype]
    return rate / 3.0 if dtype == "float32" else rate


def _imbalance(info) -> float:
    # heavy rows are split into pieces (the CUDA work list), so skew costs only logarithmically
    return 1.0 + 0.05 * math.log2(max(1.0, info["skew"]))


def predict_spmm_ours(problem, prof):
    i = problem.info
    s = ITEMSIZE.get(problem.dtype, 4)
    b, n, nnzb = i["block"], i["n"], i["nnzb"]
    flops = 2.0 * nnzb * b * b * n
    if problem.kind == "cuda":
        tile = i["gpu_tile"] or min(n, 64)
        tiles = math.ceil(n / tile)
        dram = nnzb * b * b * s * tiles + (i["k"] + i["m"] * (1 + i["beta"])) * n * s
        l2 = nnzb * b * (tile + b) * tiles * s
        t_tc = flops / tc_rate(prof, problem.dtype)
        t_mem = dram / prof.bandwidth
        t_l2 = l2 / (_L2_FACTOR * prof.bandwidth)
        seconds = max(t_tc, t_mem, t_l2) * _imbalance(i) + prof.launch_s + _HOST_OURS
        return seconds, {"flops": flops, "bytes": dram,
                         "terms": {"tensor cores": t_tc, "dram": t_mem, "l2": t_l2,
                                   "launch": prof.launch_s + _HOST_OURS}}
    rate = prof.flops(problem.dtype) * 0.25
    nbytes = nnzb * b * b * s + (i["k"] + 2 * i["m"]) * n * s
    seconds = roofline(flops, nbytes, rate, prof.bandwidth, prof.launch_s) * _imbalance(i)
    return seconds, {"flops": flops, "bytes": nbytes,
                     "terms": {"flop": flops / rate, "mem": nbytes / prof.bandwidth}}


def panel_rows(dtype: str, n: int) -> int:
    """Block rows of the 2D kernel's panel (as kl_bs_spmm2d_rows: 8, or 4 for FP64 and RHS of
    64 columns or fewer)."""
    return 8 if dtype != "float64" and n > 64 else 4


def predict_spmm_morton(problem, prof):
    """The 2D kernel (CUDA): a CTA per panel of P block rows x RHS tile of 16 P columns walks
    the panel's steps (one per block column present: reuse = blocks per step, from the pattern
    when the caller knows it, else a random pattern's P d / (1 - (1 - d)^P)); its time is the
    larger of the steps' and blocks' fitted cost, the L2 -> shared memory bytes (a B block row
    per step), DRAM and the tensor cores, and at least the call's Python (~0.1 ms)."""
    i = problem.info
    s = ITEMSIZE.get(problem.dtype, 4)
    b, n, nnzb, d = i["block"], i["n"], i["nnzb"], i["density"]
    P = panel_rows(problem.dtype, n)
    reuse = i.get("reuse") or 0.0
    if reuse <= 0.0:
        present = 1.0 - (1.0 - d) ** P
        reuse = max(1.0, P * d / present) if present > 0 else 1.0
    steps = nnzb / reuse
    # warps of 16 columns: 8 (8-row panels, and FP64 wider than 64 columns), else 4
    tile = 128 if P == 8 or (problem.dtype == "float64" and n > 64) else 64
    tiles = math.ceil(n / tile)
    cls = "half" if problem.dtype in ("float16", "bfloat16") else problem.dtype
    key = (cls, P) if (cls, P) in _2D_STEP_NS else ("float32", P)
    scale = _H100_SMS / max(1, prof.units or _H100_SMS)
    t_work = (steps * _2D_STEP_NS[key] + nnzb * _2D_BLOCK_NS[key]) * tiles * 1e-9 * scale
    # a CTA per panel x tile: fewer of them than SMs leave SMs idle (the fit's cases were
    # N = 16384 with 4 or 8 block rows a panel, CTAs enough; N = 4096 float32 at 50 %, 64 CTAs,
    # took 0.382 ms where the steps' fitted cost over the whole GPU said 0.12; H100, 2026-11-27)
    ctas = math.ceil(i["m"] / (b * P)) * tiles
    t_work *= max(1.0, max(1, prof.units or _H100_SMS) / max(1, ctas))
    t_l2 = (steps * b * tile + nnzb * b * b) * tiles * s / (_L2_FACTOR * prof.bandwidth)
    dram = nnzb * b * b * s * tiles + (i["k"] + i["m"] * (1 + i["beta"])) * n * s
    flops = 2.0 * nnzb * b * b * n
    t_tc = flops / tc_rate(prof, problem.dtype)
    t_mem = dram / prof.bandwidth
    seconds = max(max(t_work, t_l2, t_mem, t_tc) * _imbalance(i) * _2D_OVER_MODEL
                  + prof.launch_s, _HOST_2D)
    return seconds, {"flops": flops, "bytes": dram, "reuse": reuse, "steps": steps,
                     "terms": {"steps": t_work, "l2": t_l2, "dram": t_mem, "tensor cores": t_tc,
                               "launch": prof.launch_s, "host (floor)": _HOST_2D}}


def predict_spmm_torch_bsr(problem, prof):
    seconds, details = predict_spmm_ours(problem, prof)
    return seconds * _BSR_OVER_OURS, details


def predict_spmm_dense(problem, prof):
    i = problem.info
    s = ITEMSIZE.get(problem.dtype, 4)
    m, k, n = i["m"], i["k"], i["n"]
    flops = 2.0 * m * k * n
    nbytes = (m * k + k * n + m * n * (1 + i["beta"])) * s
    host = _HOST_DENSE if problem.kind == "cuda" else 0.0
    seconds = roofline(flops, nbytes, prof.flops(problem.dtype), prof.bandwidth,
                       prof.launch_s + host)
    return seconds, {"flops": flops, "bytes": nbytes,
                     "terms": {"flop": flops / prof.flops(problem.dtype),
                               "mem": nbytes / prof.bandwidth}}


def predict_spgemm_ours(problem, prof):
    i = problem.info
    s = ITEMSIZE.get(problem.dtype, 4)
    b = i["block"]
    pairs = i["pairs"]  # A block x B block products
    flops = 2.0 * pairs * b ** 3
    out = i["nnz_out"]
    if problem.kind == "cuda":
        rate = tc_rate(prof, problem.dtype) * 0.3  # one block product per warp visit
        # the numeric kernel searches each output block's column in the B rows its A row meets
        lookups = out * i["a_row_mean"] * 8.0 / (prof.units * 64 * prof.clock_hz / 400.0)
        nbytes = (pairs * 2 + out) * b * b * s
        seconds = (max(flops / rate, nbytes / prof.bandwidth) + lookups + 4 * prof.launch_s)
    else:
        rate = prof.flops(problem.dtype) * 0.1
        nbytes = (pairs * 2 + out) * b * b * s
        seconds = max(flops / rate, nbytes / prof.bandwidth) + 3 * prof.launch_s
    return seconds, {"flops": flops, "nnz_out": out}


def predict_spgemm_dense(problem, prof):
    i = problem.info
    s = ITEMSIZE.get(problem.dtype, 4)
    m, k, n = i["m"], i["k"], i["n"]
    flops = 2.0 * m * k * n
    nbytes = (m * k + k * n + 2 * m * n) * s
    seconds = roofline(flops, nbytes, prof.flops(problem.dtype), prof.bandwidth, prof.launch_s)
    return seconds, {"flops": flops}


# -- batched small products over one shared pattern (spmm_batched) ----------------------------
# Both the batched kernel and cuBLAS's batched GEMM stream A, X and C once at these orders
# (<= 256): memory-bound.  The kernel's predictor is three byte terms over rates fitted as
# fractions of the profile's copy bandwidth — A and X once from DRAM (2.61x: they partly come
# from L2), C written through shared memory (0.544x), and A's blocks read again from L2 by every
# RHS tile of a matrix (1.84x: ncu had the kernel bound by L2 -> shared memory) — by least
# squares over the H100 runs of 2026-11-26 19:31 (FP16, batch 10^4, 50 % density, orders
# 64/128/256 at RHS = order and narrow, the staged-C kernel; within -7.5 to +7.7 % of all 12
# timings, where the two-term fit before it was off by up to 37 % at order 64 and picked
# torch.bmm there, 7-11 % slower).  torch.bmm: reads at 1.04x, writes at 0.90x (same runs).
# Host costs alike (both replay in ~10 us).
_BATCHED_READ, _BATCHED_WRITE, _BATCHED_A_L2 = 2.61, 0.544, 1.84
_BMM_READ, _BMM_WRITE = 1.04, 0.90


def _batched_sizes(problem):
    i = problem.info
    s = ITEMSIZE.get(problem.dtype, 4)
    b2 = i["block"] ** 2
    return i, s, b2


# CPU (2-core EPYC, 2026-11-26, batch 2000, orders 64-256, density 0.25-0.5): the C++ SpMM over
# the block-diagonal stack ran 54-71 GFLOP/s (FP64) and 1.2-3.6x NumPy's batched matmul, whose
# small products reach 32-53 GFLOP/s: both about 0.3 of the BLAS rate, ours a little under it.
_BATCHED_CPU_OURS, _BATCHED_CPU_DENSE = 0.28, 0.3


# A right-hand side whose width is not a multiple of 8 is copied into a zeroed one that is (the
# kernel's 16-byte rows) and the result sliced back, in Python, without the replay fast path: a
# loop of such calls ran at 0.095-0.101 ms at order 64, RHS 4 (H100, session 12), where RHS 8
# took 0.034 through the replay
_HOST_PADDED = 90e-6


def predict_batched_ours(problem, prof):
    i, s, b2 = _batched_sizes(problem)
    batch, n = i["batch"], i["n"]
    pad = 0.0
    n8 = i.get("gpu_cols", -(-n // 8) * 8)  # the columns the kernel computes
    if problem.kind == "cuda" and n8 != n:
        pad = batch * i["k"] * (n8 + 2 * n) * s / prof.bandwidth + 2 * prof.launch_s
        n = n8
    flops = 2.0 * batch * i["nnzb"] * b2 * n
    reads = batch * (i["nnzb"] * b2 + i["k"] * n) * s
    writes = batch * i["m"] * n * s
    if problem.kind == "cpu":
        seconds = roofline(flops, reads + writes, prof.flops(problem.dtype) * _BATCHED_CPU_OURS,
                           prof.bandwidth, prof.launch_s)
        return seconds, {"flops": flops, "bytes": reads + writes}
    tiles = -(-n // i["gpu_tile"]) if i.get("gpu_tile") else 1  # RHS tiles a matrix takes
    a_again = batch * i["nnzb"] * b2 * s * tiles
    t_mem = (reads / (_BATCHED_READ * prof.bandwidth)
             + writes / (_BATCHED_WRITE * prof.bandwidth)
             + a_again / (_BATCHED_A_L2 * prof.bandwidth))
    t_tc = flops / tc_rate(prof, problem.dtype)
    seconds = max(t_mem, t_tc) + prof.launch_s + _HOST_DENSE + pad
    if pad:
        seconds = max(seconds, _HOST_PADDED)
    return seconds, {"flops": flops, "bytes": reads + writes,
                     "terms": {"mem": t_mem, "tensor cores": t_tc, "padding": pad}}


def predict_batched_gather(problem, prof):
    """The library path: the gathered X block rows and the per-block products are written and
    read back (2 x 2 passes over nnzb x b x n per matrix), three launches."""
    i, s, b2 = _batched_sizes(problem)
    batch, n, b = i["batch"], i["n"], i["block"]
    s = max(s, 4)  # half precision is computed in float32
    flops = 2.0 * batch * i["nnzb"] * b2 * n * 1.5
    nbytes = batch * (i["nnzb"] * b2 + (i["k"] + i["m"]) * n + 4 * i["nnzb"] * b * n) * s
    rate = prof.flops("float32" if problem.dtype in ("float16", "bfloat16") else problem.dtype)
    rate *= 0.5 if problem.kind == "cuda" else 0.1  # CPU: 2-4x slower than NumPy's dense stack
    host = 3 * prof.launch_s + (_HOST_DENSE if problem.kind == "cuda" else 0.0)
    return roofline(flops, nbytes, rate, prof.bandwidth, host), {"flops": flops, "bytes": nbytes}


def predict_batched_dense(problem, prof):
    i, s, _ = _batched_sizes(problem)
    batch, m, k, n = i["batch"], i["m"], i["k"], i["n"]
    flops = 2.0 * batch * m * k * n
    reads, writes = batch * (m * k + k * n) * s, batch * m * n * s
    if problem.kind == "cuda":
        t_mem = reads / (_BMM_READ * prof.bandwidth) + writes / (_BMM_WRITE * prof.bandwidth)
        seconds = max(flops / prof.flops(problem.dtype), t_mem) + prof.launch_s + _HOST_DENSE
        return seconds, {"flops": flops, "bytes": reads + writes,
                         "terms": {"flop": flops / prof.flops(problem.dtype), "mem": t_mem}}
    seconds = roofline(flops, reads + writes, prof.flops(problem.dtype) * _BATCHED_CPU_DENSE,
                       prof.bandwidth, prof.launch_s)
    return seconds, {"flops": flops, "bytes": reads + writes}
