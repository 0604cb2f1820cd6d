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
- ours 2D (Morton warp tiles): the L2 term divided by the reuse of a staged B row (blocks per
  distinct block column of a tile), plus a barrier per warp tile.
- torch BSR (cuSPARSE bsrmm): the same traffic at a lower efficiency (the 2026-11-26
  anchors: 0.51 ms at N = 16384, FP16, density 0.05, 256 columns).
- dense: the library's GEMM on m x k x n (roofline), plus densifying A once.
"""

from __future__ import annotations

import math

from ...common.dtypes import ITEMSIZE
from ..roofline import roofline

__all__ = ["predict_spmm_ours", "predict_spmm_morton", "predict_spmm_dense", "predict_spmm_torch_bsr",
           "predict_spgemm_ours", "predict_spgemm_dense", "tc_rate"]

_HOST_OURS = 20e-6  # the Python side of a CUDA spmm call (work list, pointers, launch)
_HOST_DENSE = 5e-6  # torch.mm / cupy.matmul on the kept dense matrix
_L2_FACTOR = 3.0  # L2 bandwidth over DRAM bandwidth (H100: ~7-9 TB/s against 2.96)
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
        l2 = nnzb * b * tile * tiles * s
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


def predict_spmm_morton(problem, prof):
    """The 2D kernel: B rows staged once per warp tile (q x q blocks) instead of once per block,
    so the L2 term shrinks by the blocks per distinct column of a tile; each tile costs a
    CTA barrier and an unpipelined load (~1.5 us of latency, spread over the CTAs an SM runs)."""
    i = problem.info
    q, d = max(1, i["tile"]), i["density"]
    cols = q * (1.0 - (1.0 - d) ** q)  # distinct block columns of a tile
    reuse = max(1.0, q * q * d / cols) if cols > 0 else 1.0
    seconds, details = predict_spmm_ours(problem, prof)
    terms = dict(details["terms"])
    if problem.kind != "cuda":
        return seconds, details
    terms["l2"] = terms["l2"] / reuse
    R = math.ceil(i["m"] / i["block"])
    tiles = (R / q) * math.ceil(i["k"] / (i["block"] * q)) * (1.0 - (1.0 - d) ** (q * q))
    tiles *= math.ceil(i["n"] / max(1, i["gpu_tile"]))
    terms["tile barriers"] = tiles * 0.7e-6 / (prof.units * 7)
    seconds = (max(terms["tensor cores"], terms["dram"], terms["l2"]) * _imbalance(i)
               + terms["tile barriers"] + terms["launch"])
    return seconds, {**details, "terms": terms, "reuse": reuse}


def predict_spmm_torch_bsr(problem, prof):
    seconds, details = predict_spmm_ours(problem, prof)
    # bsrmm re-reads B per block without our tiles: the anchors put it at ~10x our model in
    # FP16, ~4x in FP32/FP64
    factor = 10.0 if problem.dtype in ("float16", "bfloat16") else 4.0
    return seconds * factor, details


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
