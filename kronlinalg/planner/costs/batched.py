"""batched_matmul's and matmul's candidates: what each costs.

matmul's normaliser and the library candidate's roofline live in costs/matmul.py (reused here,
not repeated).  This file adds:

- KAMI's closed forms (planner/kami.py) for one work item of the CUDA kernels (a tile of one
  product on p warps), with the tensor cores a block can use capped at min(p, n_tc) (each
  tensor core serves ⌈p/n_tc⌉ warps; the paper lets two warps use four), the MMA efficiency and
  the fraction of the copy bandwidth the kernels reach as coefficients, plus the global-memory
  term the paper leaves out (the bytes of A, B and D, and C when beta != 0) and a tail (one
  item's latency).  The kernel configuration (tile, warps, items per block, MMA kind) is a fact
  the C entry point states (the operation's facts hook puts it in ``info["config1d"]`` and
  ``info["config2d"]``); this file never mirrors it.
- the array library's batched GEMM on CUDA: the copy bandwidth times the fraction cuBLAS
  strided-batched reached per order and dtype in the H100 anchors (issue 33), host-bound below.
- the CPU: NumPy's matmul makes one BLAS call per matrix of a stack (a per-matrix overhead);
  the compiled kernel runs a stack in one call at its micro-kernel's rate.
"""

from __future__ import annotations

import math

from ..kami import kami, kami_params
from ...common.dtypes import ITEMSIZE as _ITEMSIZE
from .matmul import _predict_library as _library_roofline, normalise as matmul_normalise

__all__ = ["normalise", "matmul_normalise", "COEF", "predict_library", "predict_blocked",
           "predict_kami", "predict_matmul_batched", "LIBRARY_BW_FRACTION", "MAX_ORDER"]

MAX_ORDER = 256  # orders the batched kernels are built for (larger ones tile, correctly)

# Fitted constants (the CPU ones on the development machine, 2 cores of a Xeon with AVX-512; the
# CUDA ones from the H100 run of benchmarks/batched_gpu.py, see docs/batched_matmul.md).
COEF = {
    # CPU, as ratios to the profile's per-core GEMM rate (gemm_flops / units), so they carry to
    # another machine: NumPy's matmul makes one BLAS call per matrix of a stack, at an
    # efficiency of n / (n + 12) of a large GEMM's (fit on orders 2..128) plus ~60 ns a call;
    # our micro-kernel runs 1.35x (float64) / 1.1x (float32) that per-core rate at n / (n + 6),
    # ~15 ns a product, and goes parallel from 1e8 flops (kernels/common/cpu_threads.hpp)
    "cpu_numpy_per_matrix_s": 60e-9,
    "cpu_numpy_half_order": 12.0,
    "cpu_blocked_ratio": {"float64": 1.35, "float32": 1.1},
    "cpu_blocked_half_order": 6.0,
    "cpu_blocked_per_product_s": 15e-9,
    "cpu_thread_min_flops": 1.0e8,
    "cpu_call_s": 4.0e-6,  # our CPU path: validation, casts, one kernel call
    "cuda_call_s": 9.0e-6,  # our CUDA path on the host (validation, plan, launch)
    "cuda_library_call_s": 19.0e-6,  # torch.bmm / cupy.matmul at batch 10³ (launch-bound)
    "kami_bw_fraction": 0.80,  # fraction of the copy bandwidth the kernels' loads reach
    "kami_mma_efficiency": 0.62,  # KAMI's measured MMA efficiency on Hopper
    "matmul_margin": 1.05,  # matmul takes batched_matmul only where it predicts a 5 % gain
}

# cuBLAS strided-batched (torch.bmm), batch 10⁴, fraction of the 2.96 TB/s copy bandwidth by
# order (issue 33's anchors, H100, 2026-11-26).
LIBRARY_BW_FRACTION = {
    "float64": {16: 0.415, 32: 0.875, 64: 0.973, 128: 1.0, 256: 0.726},
    "float32": {16: 0.264, 32: 0.554, 64: 0.74, 128: 0.564, 256: 0.378},
    "float16": {16: 0.115, 32: 0.439, 64: 0.875, 128: 0.953, 256: 0.973},
}


def _fraction(table, order):
    """Log-linear interpolation of a by-order table, clamped at its ends."""
    keys = sorted(table)
    if order <= keys[0]:
        return table[keys[0]] * max(order, 1) / keys[0]  # below 16: fewer bytes per request
    if order >= keys[-1]:
        return table[keys[-1]]
    for lo, hi in zip(keys, keys[1:]):
        if lo <= order <= hi:
            w = math.log(order / lo) / math.log(hi / lo)
            return table[lo] * (1 - w) + table[hi] * w
    return table[keys[-1]]


def normalise(shapes, options) -> dict:
    """Stacks: shapes (a, b) as matmul reads them (both at least 2-D).  Variable sizes: one
    shape (count, 3) with options max_order (default 256) and, where known, elements (A + B + D
    elements of all products) and flops; unknown ones are estimated for orders uniform in
    1..max_order."""
    if len(shapes) == 1:
        (table,) = shapes
        if len(table) != 2 or table[1] not in (3, 6):
            raise ValueError(f"shapes: a variable-size batch is planned as one shape (count, 3) "
                             f"or (count, 6), got {table}")
        count = table[0]
        order = int(options.get("max_order", MAX_ORDER) or MAX_ORDER)
        elements = options.get("elements")
        flops = options.get("flops")
        if elements is None:  # E[n²] = N²/3, E[n³] = N³/4 for n uniform in 1..N
            elements = 3 * count * order * order / 3.0
        if flops is None:
            flops = 2.0 * count * order ** 3 / 4.0
        return {"batch": count, "m": order, "k": order, "n": order, "variable": True,
                "flops": float(flops), "elements": float(elements), "order": order}
    if len(shapes) == 2 and (len(shapes[0]) < 2 or len(shapes[1]) < 2):
        raise ValueError(f"shapes: batched_matmul takes stacks of matrices (at least 2-D), got "
                         f"{shapes[0]} and {shapes[1]}")
    info = matmul_normalise(shapes, options)
    info["variable"] = False
    info["order"] = max(info["m"], info["n"])
    return info


def _bytes(info, dtype, options):
    s_e = _ITEMSIZE.get(dtype, 4)
    extra = info["batch"] * info["m"] * info["n"] if options.get("beta") else 0
    return (info["elements"] + extra) * s_e


# ---------------------------------------------------------------------------------------------
# the library's matmul


def predict_library(problem, prof):
    """NumPy / torch / CuPy matmul on the stack (one call; alpha and beta as array operations)."""
    seconds, details = _library_roofline(problem, prof)
    info = problem.info
    if problem.kind == "cpu":
        # one BLAS call per matrix of the stack, each at a small matrix's efficiency, on one
        # core unless the matrices are large enough for BLAS's threads
        order = max(1, min(info["m"], info["n"], info["k"]))
        per_core = prof.flops(problem.dtype) / max(1, prof.units)
        rate = per_core * order / (order + COEF["cpu_numpy_half_order"])
        if info["m"] * info["n"] * info["k"] >= 128 ** 3:
            rate *= max(1, prof.units)
        flop = info["flops"] / rate
        per = info["batch"] * COEF["cpu_numpy_per_matrix_s"]
        if info.get("variable"):
            per += info["batch"] * COEF["cpu_call_s"]  # a Python-level loop over the problems
        mem = details["terms"]["mem"]
        seconds = max(flop, mem) + per + prof.launch_s
        details["terms"] = {"flop": flop, "per-matrix": per, "mem": mem, "call": prof.launch_s}
        return seconds, details
    dt = "float16" if problem.dtype in ("float16", "bfloat16") else problem.dtype
    frac = _fraction(LIBRARY_BW_FRACTION.get(dt, LIBRARY_BW_FRACTION["float32"]), info["order"])
    nbytes = _bytes(info, problem.dtype, problem.options)
    mem = nbytes / (prof.bandwidth * frac)
    comp = info["flops"] / prof.flops(problem.dtype)
    gpu = max(mem, comp)
    if info.get("variable"):  # padded to the largest order: the bytes of count max-size products
        order = info["order"]
        padded = 3 * info["batch"] * order * order * _ITEMSIZE.get(problem.dtype, 4)
        gpu = max(padded / (prof.bandwidth * frac),
                  2.0 * info["batch"] * order ** 3 / prof.flops(problem.dtype))
    seconds = max(gpu, COEF["cuda_library_call_s"])
    details.update({"bytes": nbytes, "bw_fraction": frac})
    details["terms"] = {"mem": mem, "flop": comp, "host": COEF["cuda_library_call_s"]}
    return seconds, details


# ---------------------------------------------------------------------------------------------
# the CPU kernel


def predict_blocked(problem, prof):
    info = problem.info
    cores = max(1, prof.units) if info["flops"] >= COEF["cpu_thread_min_flops"] else 1
    order = max(1, min(info["m"], info["n"], info["k"]))
    ratio = COEF["cpu_blocked_ratio"].get(problem.dtype, 1.0)
    per_core = prof.flops(problem.dtype) / max(1, prof.units)
    rate = per_core * ratio * order / (order + COEF["cpu_blocked_half_order"]) * cores
    flop = info["flops"] / rate
    per = info["batch"] * COEF["cpu_blocked_per_product_s"] / cores
    nbytes = _bytes(info, problem.dtype, problem.options)
    mem = nbytes / prof.bandwidth
    seconds = max(flop + per, mem) + COEF["cpu_call_s"]
    return seconds, {"flops": info["flops"], "bytes": nbytes, "threads": cores,
                     "terms": {"flop": flop, "per-product": per, "mem": mem,
                               "call": COEF["cpu_call_s"]}}


# ---------------------------------------------------------------------------------------------
# the CUDA kernels (KAMI 1D / 2D)

_MMA_RATE_KIND = {"dmma-m8n8k4": "fp64", "hmma-m16n8k16": "fp16", "3xtf32-m16n8k8": "tf32"}


def _smem_bytes(cfg, s_e):
    """Shared memory of one block: two buffers a group, each a k-panel of A and B or the C tile
    (kernels/batched/batched_cuda_kernels.cuh, Cfg::SMEM)."""
    acc = 8 if s_e == 8 else 4
    bm, bn, bk = cfg["tile_m"], cfg["tile_n"], cfg["tile_k"]
    stage = (bm * (bk + 8) + bk * (bn + 8)) * s_e
    return cfg["items_per_block"] * 2 * max(stage, bm * (bn + 4) * acc)


def _smem_per_sm(prof):
    cc = tuple(prof.cc or (8, 0))
    return 227 * 1024 if cc >= (9, 0) else 163 * 1024 if cc == (8, 0) else 99 * 1024


def predict_kami(dims):
    """The predictor of the CUDA kernel in the 1D (dims=1) or 2D (dims=2) arrangement."""

    def predict(problem, prof):
        info = problem.info
        cfg = info.get(f"config{dims}d")
        if cfg is None:
            return float("inf"), {"why": "no kernel configuration (facts hook absent)"}
        s_e = _ITEMSIZE.get(problem.dtype, 4)
        bm, bn, p = cfg["tile_m"], cfg["tile_n"], cfg["warps"]
        m, n, k = info["m"], info["n"], max(info["k"], 1)
        mt, nt = min(bm, m), min(bn, n)
        kstep = {"dmma-m8n8k4": 4, "hmma-m16n8k16": 16}.get(cfg["mma"], 8)
        kp = -(-k // kstep) * kstep
        tiles = -(-m // bm) * -(-n // bn)
        items = info["batch"] * tiles
        n_tc = max(1, prof.n_tc)
        eff = COEF["kami_mma_efficiency"]
        if cfg["mma"] == "cuda-cores":
            sm_rate = 256.0 * eff  # 128 FMA lanes an SM
            params = None
        else:
            try:
                params = kami_params(prof, problem.dtype)
            except ValueError:
                return float("inf"), {"why": f"{prof.name} has no tensor-core rate"}
            if cfg["mma"] == "3xtf32-m16n8k8":
                params["O_tc"] /= 3.0  # three TF32 products per product
            params["n_tc"] = min(n_tc, p)  # the tensor cores one block's p warps can use
            sm_rate = params["O_tc"] * n_tc * eff
        if params is not None:
            block = kami(dims if dims in (1, 2) else 1, mt, nt, kp, p, **params).T_all / eff
        else:
            block = 2.0 * mt * nt * kp / (min(p, n_tc) * 64.0 * eff)
        per_sm = max(1, min(_smem_per_sm(prof) // max(1, _smem_bytes(cfg, s_e)),
                            64 // max(1, p * cfg["items_per_block"])))
        resident = per_sm * cfg["items_per_block"]  # items an SM holds at once
        item_rate = min(resident / block, sm_rate / (2.0 * mt * nt * kp))  # items/cycle/SM
        compute = items / (max(1, prof.units) * item_rate) / prof.clock_hz
        nbytes = _bytes(info, problem.dtype, problem.options)
        mem = nbytes / (prof.bandwidth * COEF["kami_bw_fraction"])
        tail = block / prof.clock_hz
        gpu = max(mem, compute) + tail
        seconds = max(gpu, COEF["cuda_call_s"]) + prof.launch_s
        return seconds, {"bytes": nbytes, "tile": f"{bm}x{bn}", "warps": p,
                         "per_block": cfg["items_per_block"], "mma": cfg["mma"],
                         "block_cycles": block,
                         "terms": {"mem": mem, "compute": compute, "tail": tail,
                                   "host": COEF["cuda_call_s"], "launch": prof.launch_s}}

    predict.__name__ = f"predict_kami{dims}d"
    return predict


def predict_matmul_batched(inner):
    """matmul's batched candidate: batched_matmul's best predictor with matmul's margin (it runs
    only where it predicts at least a 5 % gain over the library)."""

    def predict(problem, prof):
        seconds, details = inner(problem, prof)
        return seconds * COEF["matmul_margin"], {**details, "margin": COEF["matmul_margin"]}

    return predict
