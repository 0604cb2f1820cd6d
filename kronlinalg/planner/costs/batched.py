"""batched_matmul's and matmul's candidates: what each costs.

matmul's normaliser and the library candidate's roofline live in costs/matmul.py (reused here,
not repeated).  This file adds:

- our CUDA kernels: the global-memory term KAMI's model leaves out (the bytes of A, B and D, and
  C when beta != 0, over the fraction of the copy bandwidth the kernels reached, measured) and a
  compute term (the flops over the rate they reached, measured, scaled to the GPU's tensor
  cores), plus a tail of one work item's cycles by KAMI's closed forms (planner/kami.py; the
  tensor cores a block of p warps can use capped at min(p, n_tc): each serves ⌈p/n_tc⌉ warps,
  where the paper lets two warps use four).  The cycle model is not yet calibrated against
  clock64() measurements of our kernels (its T_cm / T_cp are reported in the details).  The kernel configuration (tile, warps, items per block, MMA kind) is a fact
  the C entry point states (the operation's facts hook puts it in ``info["config1d"]`` and
  ``info["config2d"]``); this file never mirrors it.
- the array library's batched GEMM on CUDA: the copy bandwidth times the fraction cuBLAS
  strided-batched reached per order and dtype in the H100 anchors (issue 33), host-bound below.
- the CPU: NumPy's matmul makes one BLAS call per matrix of a stack (a per-matrix overhead);
  the compiled kernel runs a stack in one call at its micro-kernel's rate.
"""

from __future__ import annotations

import math
import os

from ..kami import kami, kami_params
from ..profiles import blas_threads
from ...common.dtypes import ITEMSIZE as _ITEMSIZE
from .matmul import _predict_library as _library_roofline, normalise as matmul_normalise

__all__ = ["normalise", "matmul_normalise", "COEF", "predict_library", "predict_blocked",
           "predict_kami", "predict_matmul_batched", "LIBRARY_BW_FRACTION",
           "LIBRARY_LOW_RANK_FRACTION", "KAMI_MEASURED", "TINY_MEASURED", "TINY_GENERIC_MEASURED",
           "MAX_ORDER"]

MAX_ORDER = 256  # orders the batched kernels are built for (larger ones tile, correctly)

# Fitted constants (the CPU ones on the development machine, 2 cores of a Xeon with AVX-512; the
# CUDA ones from the H100 run of benchmarks/batched_gpu.py, see docs/batched_matmul.md).
COEF = {
    # CPU, as ratios to the profile's per-core GEMM rate (gemm_flops / units), so they carry to
    # another machine: NumPy's matmul makes one BLAS call per matrix of a stack, at an
    # efficiency of n / (n + 12) of a large GEMM's (fit on orders 2..128) plus ~40 ns a call;
    # our micro-kernel runs 1.5x (float64) / 1.25x (float32) that per-core rate at n / (n + 6),
    # ~10 ns a product (orders <= 8 and one column: stack-level loops, 1.5-15 ns a product)
    "cpu_numpy_per_matrix_s": 40e-9,
    "cpu_numpy_half_order": 12.0,
    "cpu_numpy_threads_from": 1.0e6,  # m·n·k from which BLAS runs a matrix on its threads
    "cpu_blocked_ratio": {"float64": 1.5, "float32": 1.25},
    "cpu_blocked_half_order": 6.0,
    "cpu_blocked_per_product_s": 10e-9,
    # low-rank products with wide outputs (3k <= min(m, n), m or n > 32) out of the L2s: a
    # short k loop per register tile and the whole output to store; one thread, 64x8x64
    # float64 batch 1000 ran at 0.79x NumPy where the rate above predicted 2x (in cache, 1.1-1.5x;
    # 2-core EPYC, 2026-11-27)
    "cpu_blocked_low_rank": 0.35,
    # threads from 1.5e5 flops in float64 terms (float32's count half: kPoolMinFlops in
    # kernels/batched/batched_cpu_pool.hpp), as many as OpenMP's setting allows
    "cpu_thread_min_flops": 1.5e5,
    # a repeated call (the planner's pick serves every repeat of a signature): ours is the
    # compiled replay (memo check, the result allocated, one kernel call: 0.2-0.25 µs), NumPy's
    # matmul 0.75-0.8 µs (2-core EPYC, batch 4, order 1-4); data that fits the L2s streams at
    # ~8x the memory bandwidth the profile gives
    "cpu_call_s": 0.25e-6,
    "cpu_numpy_call_s": 0.8e-6,
    "cpu_cache_speedup": 8.0,
    "cpu_loop_s": 4.0e-6,  # the library's Python loop over variable sizes, a product
    # CUDA, measured on an H100 (benchmarks/batched_gpu.py, 2026-11-26; CUDA events over warm
    # loops, so host time shows where a call is host-bound)
    # host time a call (benchmarks/batched_probe.py, H100 host, 2026-11-27, medians over the
    # batch-10³ rows of every dtype: ours 12-18 µs, torch.bmm 15-20 on the same rows, 3 µs more)
    "cuda_call_s": 14.0e-6,  # our path: the per-signature fast path, torch.empty, the launch
    "cuda_library_call_s": 17.0e-6,  # torch.bmm at batch 10³ (host-bound)
    "cuda_library_loop_s": 46.0e-6,  # a Python loop of the library's matmul, per product
    "kami_mma_efficiency": 0.62,  # KAMI's MMA efficiency on Hopper (the cycle model's term)
    "matmul_margin": 1.05,  # matmul takes batched_matmul only where it predicts a 5 % gain
    # ... and on the CPU also 1.5 µs: calls of a few µs are decided by the fixed costs, which
    # the model knows least well (held-out grid, 2-core EPYC: matmul ran 1.1-1.8x NumPy's time
    # on 9 of 66 shapes, all of 5-11 µs where the predicted gain was 0.4-1.4 µs)
    "matmul_margin_cpu_s": 0.1e-6,
}

# cuBLAS strided-batched (torch.bmm), batch 10⁴, fraction of the 2.96 TB/s copy bandwidth by
# order, measured in the same run as our kernels (H100, 2026-11-26; issue 33's anchors agree
# within 10-20 % at orders >= 32).
# Orders 8, 12, 20 and 24: batch 10⁵ of the held-out grid (benchmarks/batched_planner_gpu.py,
# H100, 2026-11-27; cuBLAS's kernels differ order by order there: float16 order 16 at 0.145, 12
# and 20 at 0.34).
LIBRARY_BW_FRACTION = {
    "float64": {8: 0.15, 12: 0.32, 16: 0.513, 20: 0.66, 24: 0.88, 32: 0.975, 64: 1.0,
                128: 0.999, 256: 0.763},
    "float32": {8: 0.13, 12: 0.23, 16: 0.373, 20: 0.52, 24: 0.65, 32: 0.726, 64: 0.786,
                128: 0.534, 256: 0.38},
    "float16": {8: 0.04, 12: 0.34, 16: 0.145, 20: 0.35, 24: 0.34, 32: 0.565, 64: 0.968,
                128: 0.968, 256: 0.967},
}

# ... but low-rank products (k <= min(m, n) / 4) stream worse than that size says, float64 most:
# m = n = 128, k = 16 and 32, batch 10⁴ (same run as KAMI_MEASURED, 2026-11-26, H100)
LIBRARY_LOW_RANK_FRACTION = {"float64": 0.76, "float32": 0.72, "float16": 0.90}

# Our kernels (H100, 2026-11-26, the kernels of this tree; benchmarks/batched_calibrate.py
# prints these from a run's JSON): the fraction of the copy bandwidth where they are memory-bound
# (orders up to 64; beyond, the value at 64) and the flop rate where they are compute-bound
# (order 256), per dtype and arrangement.  2D at orders <= 16 runs a 32 x 32 tile on a 16 x 16
# product.  float32 is 3xTF32; IEEE mode ("ieee") was not measured: a third of 3xTF32's rate is
# assumed.  Variable sizes (orders uniform in 8..256, packed: most rows unaligned) ran `variable`
# times slower than the same flops at the order-256 rate.
KAMI_MEASURED = {
    ("float64", 1): {"rate": 28.7e12, "bw": {16: 0.80, 32: 0.814, 64: 0.903}, "variable": 2.19},
    ("float64", 2): {"rate": 23.3e12, "bw": {16: 0.366, 32: 0.905, 64: 0.875}, "variable": 2.29},
    ("float32", 1): {"rate": 22.7e12, "bw": {16: 0.513, 32: 0.701, 64: 0.564}, "variable": 2.24},
    ("float32", 2): {"rate": 24.9e12, "bw": {16: 0.198, 32: 0.503, 64: 0.599}, "variable": 2.49},
    ("float16", 1): {"rate": 85.8e12, "bw": {16: 0.263, 32: 0.49, 64: 0.624}, "variable": 4.4},
    ("float16", 2): {"rate": 83.5e12, "bw": {16: 0.099, 32: 0.303, 64: 0.62}, "variable": 4.4},
}
# The large-tile kernel (float16 / bfloat16 and 3xTF32 from order 96 on 128 x 128 tiles, orders
# 48-95 of uniform stacks on its 64 x 64 tiles; 1D and auto): its fraction of the copy bandwidth
# by order and its flop rate at order 256, batch 10⁴; the variable case (10⁴ packed products of
# orders 8..256, unaligned rows staged in place) against that rate.  H100, 2026-11-27 (session
# 11: unrolled panel loads, unpredicated MMAs on full warps, stage metadata in shared memory),
# benchmarks/data/batched_h100_2026-11-27_large_s11{,_staging}.json.  (float64 stacks stay on
# the small tiles, which ran faster; its variable batches split between the two kernels,
# 6.54 ms: the factor of ("float64", 1) above.)
KAMI_MEASURED[("float16", "large")] = {"rate": 1.26e14, "bw": {64: 0.764, 128: 0.70, 256: 0.50},
                                       "variable": 4.68}
KAMI_MEASURED[("float32", "large")] = {"rate": 3.61e13, "bw": {64: 0.70, 128: 0.49, 256: 0.29},
                                       "variable": 2.7}
# The tiny-product kernel (kernels/batched/batched_cuda_tiny.cuh): stacks whose products are
# each one row-major block (the plan's option dense=True), square orders 16 and 32 (and, outside
# float64, every order up to 16): the fraction of the copy bandwidth it reached, batch 10⁴, CUDA
# events with the host hidden (H100, 2026-11-27, benchmarks/batched_probe.py).
TINY_MEASURED = {
    "float64": {16: 0.88, 32: 0.92},
    "float32": {16: 0.84, 32: 0.85},
    "float16": {16: 0.58, 32: 0.70},
}


# The thin-product kernel (kernels/batched/batched_cuda_thin.cuh): dense stacks of a short k (low
# rank: k <= 32 from order 64, float16 / bfloat16 / 3xTF32 float32), the fraction of the copy
# bandwidth it reached on the A + B + D bytes by order (k 8-32), batch 10⁴, loops of calls
# (H100, 2026-11-27, benchmarks/data/batched_thin_ab_h100_2026-11-27_s15e.json; float32 from
# order 128 the staged 8-warp form of run s16e, batched_thin_ab_h100_2026-11-27_s16e.json)
THIN_MEASURED = {"float32": {64: 0.78, 128: 0.87, 256: 0.81},
                 "float16": {64: 0.78, 128: 0.88, 256: 0.87}}


# ... and its generic variant (orders up to 16 but the square 16, outside float64: sizes read at
# run time, scalar fragment reads), order 16 (the first tiny run, 2026-11-27: float16 15.6 µs,
# float32 17.5 µs for 10⁴ products; at order 12, float16, 10⁵ products: 0.25)
TINY_GENERIC_MEASURED = {"float32": 0.59, "float16": 0.33}

# The tile kernels between the orders they were measured at: a product of order n in tiles of
# `tile` moves what a full tile would at (n / tile) of its rate (H100, 2026-11-27, the held-out
# grid of benchmarks/batched_planner_gpu.py: orders 20 and 24 on 32 x 32 tiles ran at 0.4-0.8 of
# the order-32 fraction); 2-byte rows that are not a multiple of 16 bytes take the element loads,
# at half that again (float16 order 20: 0.13 of copy against order 24's 0.25)
TILE_ORDER_EXPONENT = 1.0
UNALIGNED_ROWS = 0.5
# The large-tile kernel at orders between one tile and two (65-95 on its 64 x 64 tiles,
# 129-255 on 128 x 128) runs every tile of the padded product at the time of a full one: the
# fraction by the padded area (H100, held-out grids of 2026-11-27: float16 order 72 at batch 10⁴
# 491 µs, order 80 562, where bytes at the order-64 fraction said 140 and 175, (72 / 128)² puts
# it at 441; order 144, 2,030 µs, (144 / 256)² at 1,980)
LARGE_PAD_EXPONENT = 2.0

# The least device time of one launch of our tile kernels, where the batch is too small to fill
# the GPU: rounds of resident work items, each a chain of k-panels (plus the pipeline's fill) at
# STEP_S a panel, after LAUNCH_S (H100, same grid: batch 100 at orders 80-160 took 20-34 µs of
# device time against cuBLAS's 13-20 µs of host time; 128 x 128 tiles 2.4 µs a panel, 64 x 64
# tiles with two buffers 4.5 µs)
TILE_STEP_S = {"large": 2.4e-6, "small": 4.5e-6}
TILE_LAUNCH_S = 3.0e-6


def _least_launch_s(info, cfg, large, prof):
    """The tile kernels' device time floor for a small batch (TILE_STEP_S)."""
    items = info["batch"] * -(-info["m"] // cfg["tile_m"]) * -(-info["n"] // cfg["tile_n"])
    resident = max(1, prof.units) * cfg["blocks_per_sm"] * max(1, cfg["items_per_block"])
    rounds = -(-items // resident)
    panels = -(-max(1, info["k"]) // max(1, cfg["tile_k"]))
    # the pipeline fills once a launch: a persistent block streams its next item's first panels
    # while it computes this one's last (charged a round, the floor over-predicted low-rank
    # float64 stacks 1.5x: 921 µs where 616 ran, batch 10⁴, m = n = 128, k = 16); one panel's
    # time (three over-predicted batch 100 of float16 orders 96 and 112 on the 128 x 128 tiles
    # since session 11's faster panels: 17.4 and 19.8 µs where 12.6 and 12.7 ran, 2026-11-27)
    fill = 1
    return TILE_LAUNCH_S + (rounds * panels + fill) * TILE_STEP_S["large" if large else "small"]


_H100 = {"fp64": 256 * 132 * 1.98e9, "tf32": 2048 * 132 * 1.98e9, "fp16": 4096 * 132 * 1.98e9}


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
        # BLAS's threads pay from about 100³ (2-core EPYC, OpenBLAS, float32/float64: order 80
        # ran no faster on two threads than on one, orders 112-128 1.6-1.9x faster); as many as
        # its environment allows (OPENBLAS_NUM_THREADS=1: one core, not all)
        if info["m"] * info["n"] * info["k"] >= COEF["cpu_numpy_threads_from"]:
            rate *= blas_threads(prof.units)
        flop = info["flops"] / rate
        per = info["batch"] * COEF["cpu_numpy_per_matrix_s"]
        if info.get("variable"):
            per += info["batch"] * COEF["cpu_loop_s"]  # a Python-level loop over the problems
        mem = _cpu_mem(details["bytes"], prof)
        call = COEF["cpu_numpy_call_s"]
        seconds = max(flop, mem) + per + call
        details["terms"] = {"flop": flop, "per-matrix": per, "mem": mem, "call": call}
        return seconds, details
    dt = "float16" if problem.dtype in ("float16", "bfloat16") else problem.dtype
    # cuBLAS's efficiency follows the product's size: the geometric mean of m, n, k (a low-rank
    # 128 x 16 x 128 product streams like an order-64 one)
    size = (max(1, info["m"]) * max(1, info["n"]) * max(1, info["k"])) ** (1.0 / 3.0)
    if info.get("variable"):
        size = info["order"]
    frac = _fraction(LIBRARY_BW_FRACTION.get(dt, LIBRARY_BW_FRACTION["float32"]), size)
    if not info.get("variable") and 4 * info["k"] <= min(info["m"], info["n"]):
        frac = min(frac, LIBRARY_LOW_RANK_FRACTION.get(dt, frac))  # see the table
    nbytes = _bytes(info, problem.dtype, problem.options)
    mem = nbytes / (prof.bandwidth * frac)
    comp = info["flops"] / prof.flops(problem.dtype)
    gpu = max(mem, comp)
    if info.get("variable"):  # a Python loop over the products, one matmul each
        gpu = max(gpu, info["batch"] * COEF["cuda_library_loop_s"])
    seconds = max(gpu, COEF["cuda_library_call_s"])
    details.update({"bytes": nbytes, "bw_fraction": frac})
    details["terms"] = {"mem": mem, "flop": comp, "host": COEF["cuda_library_call_s"]}
    return seconds, details


def _cpu_mem(nbytes, prof):
    """Seconds to stream nbytes on the CPU: from the L2s when they hold it."""
    fast = COEF["cpu_cache_speedup"] if nbytes <= prof.cache_bytes else 1.0
    return nbytes / (prof.bandwidth * fast)


# ---------------------------------------------------------------------------------------------
# the CPU kernel


def _omp_threads(cores):
    """Threads the CPU kernel's pool takes: OMP_NUM_THREADS (what omp_get_max_threads reads),
    at most the cores; the cores when it is not set."""
    text = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return max(1, min(cores, int(text))) if text.isdigit() and int(text) > 0 else cores


def predict_blocked(problem, prof):
    info = problem.info
    f64_flops = info["flops"] * (0.5 if problem.dtype == "float32" else 1.0)
    cores = (_omp_threads(max(1, prof.units)) if f64_flops >= COEF["cpu_thread_min_flops"]
             else 1)
    order = max(1, min(info["m"], info["n"], info["k"]))
    # (the same per-core ratio at orders >= 128: 2-core EPYC, one BLAS thread, orders 128-256,
    # batch 2 and 8: our kernel took 0.63-0.78 of NumPy's time; with BLAS on both cores NumPy
    # wins below the kernel's threading threshold and loses above it, 0.60-0.76 -- the BLAS
    # threads, not a cutoff at 128, decide)
    ratio = COEF["cpu_blocked_ratio"].get(problem.dtype, 1.0)
    nbytes = _bytes(info, problem.dtype, problem.options)
    if (3 * info["k"] <= min(info["m"], info["n"]) and max(info["m"], info["n"]) > 32
            and nbytes > prof.cache_bytes):
        ratio *= COEF["cpu_blocked_low_rank"]
    per_core = prof.flops(problem.dtype) / max(1, prof.units)
    rate = per_core * ratio * order / (order + COEF["cpu_blocked_half_order"]) * cores
    flop = info["flops"] / rate
    per = info["batch"] * COEF["cpu_blocked_per_product_s"] / cores
    mem = _cpu_mem(nbytes, prof)
    seconds = max(flop + per, mem) + COEF["cpu_call_s"]
    return seconds, {"flops": info["flops"], "bytes": nbytes, "threads": cores,
                     "terms": {"flop": flop, "per-product": per, "mem": mem,
                               "call": COEF["cpu_call_s"]}}


# ---------------------------------------------------------------------------------------------
# the CUDA kernels (KAMI 1D / 2D)

_MMA_RATE_KIND = {"dmma-m8n8k4": "fp64", "hmma-m16n8k16": "fp16", "3xtf32-m16n8k8": "tf32"}


def _rate_scale(prof, kind):
    """This GPU's tensor-core rate relative to the H100 our kernels were measured on."""
    rate = prof.tc_ops.get(kind, 0) * prof.units * prof.clock_hz
    return rate / _H100[kind] if rate else 0.0


def predict_kami(dims):
    """The predictor of the CUDA kernel in the 1D (dims=1) or 2D (dims=2) arrangement: the
    larger of the bytes over the measured fraction of the bandwidth and the flops over the
    measured rate (KAMI_MEASURED, scaled to this GPU's tensor cores), a tail of one work item's
    KAMI cycles, and the host floor.  The details carry the item's KAMI cycle breakdown (the
    closed forms with the tensor cores a block can use capped at min(p, n_tc))."""

    def predict(problem, prof):
        info = problem.info
        cfg = info.get(f"config{dims}d")
        if cfg is None:
            return float("inf"), {"why": "no kernel configuration (facts hook absent)"}
        dt = "float16" if problem.dtype in ("float16", "bfloat16") else problem.dtype
        # the 128 x 128 kernel and its 64 x 64 tiles (a 2-D warp grid under kami1d): their own
        # measured constants
        large = cfg["tile_m"] >= 128 or (dims == 1 and cfg["dims"] == 2)
        meas = KAMI_MEASURED.get((dt, "large" if large else dims))
        kind = {"float64": "fp64", "float32": "tf32"}.get(dt, "fp16")
        scale = _rate_scale(prof, kind)
        if meas is None or scale == 0.0:
            return float("inf"), {"why": f"{prof.name} has no {kind} tensor-core rate"}
        s_e = _ITEMSIZE.get(problem.dtype, 4)
        bm, bn, p = cfg["tile_m"], cfg["tile_n"], cfg["warps"]
        m, n, k = info["m"], info["n"], max(info["k"], 1)
        mt, nt = min(bm, m), min(bn, n)
        kstep = {"dmma-m8n8k4": 4, "hmma-m16n8k16": 16}.get(cfg["mma"], 8)
        kp = -(-k // kstep) * kstep
        rate = meas["rate"] * scale
        if cfg["mma"] == "cuda-cores":
            rate /= 3.0  # IEEE float32 on CUDA cores: not measured (see KAMI_MEASURED)
        block = 0.0
        try:
            params = kami_params(prof, problem.dtype)
            if cfg["mma"] == "3xtf32-m16n8k8":
                params["O_tc"] /= 3.0  # three TF32 products per product
            params["n_tc"] = min(max(1, prof.n_tc), p)  # the tensor cores p warps can use
            cyc = kami(dims, mt, nt, kp, p, **params)
            block = cyc.T_all / COEF["kami_mma_efficiency"]
        except ValueError:
            cyc = None
        order = info["order"]
        # the tiny-product kernel (the configuration says which; the plan's option dense says
        # whether the stack's layout is the one it takes)
        dense = problem.options.get("dense") and not info.get("variable")
        tiny = cfg.get("tiny") if dense else None
        if not tiny and dense and cfg.get("thin"):  # the thin-product kernel (same layout)
            tiny = "thin"
            frac = _fraction(THIN_MEASURED[dt], order)
            block = 0.0
        elif tiny == "fixed":  # the tiny-product kernel: its own measured fractions, no tile tail
            frac = _fraction(TINY_MEASURED[dt], order)
            block = 0.0
        elif tiny == "generic":
            frac = TINY_GENERIC_MEASURED.get(dt, 0.59) * min(1.0, max(order, 1) / 16.0)
            # (2-byte rows not a multiple of 8 bytes: H100, held-out grid of 2026-11-27, float16
            # order 10 at batch 10⁵ 219 µs, 0.09 of copy, where order 12 ran at 0.25)
            if s_e == 2 and (info["k"] % 4 or info["n"] % 4):
                frac *= UNALIGNED_ROWS
            block = 0.0
        else:
            frac = _fraction(meas["bw"], order if large else min(order, 64))
            if not info.get("variable"):
                # a partial tile moves a full tile's panels (see TILE_ORDER_EXPONENT)
                # (below the table's first order, 16, _fraction scales already)
                tile = cfg["tile_m"]
                if min(meas["bw"]) < order < tile:
                    frac *= (order / tile) ** TILE_ORDER_EXPONENT
                elif large and tile < order < 2 * tile and order < max(meas["bw"]):
                    frac *= (order / (2 * tile)) ** LARGE_PAD_EXPONENT
                if s_e == 2 and (info["k"] % 8 or info["n"] % 8):
                    frac *= UNALIGNED_ROWS
        nbytes = _bytes(info, problem.dtype, problem.options)
        mem = nbytes / (prof.bandwidth * frac)
        compute = info["flops"] / rate
        if info.get("variable"):
            compute *= meas["variable"]
        tail = block / prof.clock_hz
        gpu = max(mem, compute) + tail
        # (the floor: 128 x 128 tiles and the small-tile kernel's 64 x 64, where it was measured)
        if not tiny and not info.get("variable") and (
                cfg["tile_m"] >= 128 or (not large and cfg["tile_m"] >= 64)):
            floor = _least_launch_s(info, cfg, large, prof)
            if large and s_e == 2 and (info["k"] % 8 or info["n"] % 8):
                floor /= UNALIGNED_ROWS  # (realigned panels: float16 order 100, batch 100, 22.5 µs)
            gpu = max(gpu, floor)
        seconds = max(gpu, COEF["cuda_call_s"]) 
        details = {"bytes": nbytes, "tile": f"tiny ({tiny})" if tiny else f"{bm}x{bn}", "warps": p,
                   "per_block": cfg["items_per_block"], "mma": cfg["mma"],
                   "block_cycles": block, "bw_fraction": frac,
                   "terms": {"mem": mem, "compute": compute, "tail": tail,
                             "host": COEF["cuda_call_s"]}}
        if cyc is not None:
            details["kami"] = {"T_cm": cyc.T_cm, "T_cp": cyc.T_cp, "T_all": cyc.T_all,
                               "stages": cyc.stages}
        return seconds, details

    predict.__name__ = f"predict_kami{dims}d"
    return predict


def predict_matmul_batched(inner):
    """matmul's batched candidate: batched_matmul's best predictor with matmul's margin (it runs
    only where it predicts at least a 5 % gain over the library, and on the CPU 1.5 µs)."""

    def predict(problem, prof):
        seconds, details = inner(problem, prof)
        extra = COEF["matmul_margin_cpu_s"] if problem.kind == "cpu" else 0.0
        return (seconds * COEF["matmul_margin"] + extra,
                {**details, "margin": COEF["matmul_margin"], "margin_s": extra})

    return predict
