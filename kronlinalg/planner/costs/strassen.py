"""strassen_matmul's schedule and costs: the corrected MSMES schedule as a list of launches,
and a per-launch model that prices exactly those launches.

The schedule (MSMES, Krishnan 2021, with the thesis's misprints corrected).  Quadrants
A = [A0 A1; A2 A3], the same for B and C.  Per level:

- S1:  A2 += A3; B1 -= B3; B2 -= B0; A1 += A0
- S2:  M1 = A2·B0 -> C2 +=, C3 -=;  M2 = A0·B1 -> C1 +=, C3 +=;
       M3 = A3·B2 -> C0 +=, C2 +=;  M4 = A1·B3 -> C1 +=, C0 -=
- S3+S4 (one pass): A0 += A3; B0 += B3; A2 -= A0; B1 += B0; A1 -= A0; B2 += B0
- S5:  M0 = A0·B0 -> C0 +=, C3 +=;  M5 = A2·B1 -> C3 +=;  M6 = A1·B2 -> C0 +=
- S6+S7 (one pass): A0 -= A3; B0 -= B3; A1 += A3; B1 -= B0; A2 += A0; B2 -= B3

The products run in the groups {M1, M4}, {M2, M3}, {M0}, {M5, M6}: within a group no two
products share a C block (so no atomics: C is bitwise deterministic) nor an operand block.
Recursion runs the groups of every product of a group in lockstep, so one launch holds all
the leaf products of a group (at most 2^L) and each leaf adds its product into its target
table (at most 2^L signed C blocks).  beta is applied by the first group at every depth.

Everything here is arithmetic on shapes: this module imports neither the operation nor the
kernels (kernel facts such as the leaf tile arrive in the problem's info dict).
"""

from __future__ import annotations

import math

from ..msmes import msmes_time
from ..strassen_schedule import (  # noqa: F401  (re-exported: the operation's view)
    AddInto, Combine, GROUPS, Leaf, MAX_LEVELS, MAX_RELOADED_LEVELS, MAX_WINOGRAD_LEVELS,
    PRODUCTS, Pass, RELOADED, SumLeaf, Product, Sums, WinogradSums, label,
    private_schedule, reloaded_schedule, schedule, sums_schedule, winograd_schedule,
    winograd_workspace)
from ...common.dtypes import ITEMSIZE as _ITEMSIZE

__all__ = ["PRODUCTS", "GROUPS", "MAX_LEVELS", "Pass", "Leaf", "schedule", "core_sizes", "label",
           "normalise", "predict_classical", "predict_strassen", "predict_strassen_cublas",
           "predict_strassen_reloaded", "reloaded_schedule", "SumLeaf", "RELOADED",
           "sums_schedule", "Sums", "Product", "private_schedule", "winograd_schedule",
           "WinogradSums", "Combine", "AddInto", "winograd_applies",
           "winograd_workspace", "MAX_WINOGRAD_LEVELS", "short_call_gain",
           "launch_times", "msmes_reference", "MARGIN"]

# elements read + written per quadrant element by each pass, for A (and alike for B)
PASS_ACCESSES = {1: 6, 2: 7, 3: 7}
MARGIN = 1.05  # auto takes Strassen only where predicted at least 5 % faster than classical


def core_sizes(m: int, k: int, n: int, levels: int) -> tuple:
    """(mc, kc, nc): the largest multiples of 2^levels within m, k, n (the Strassen core; the
    remainders are finished by classical strips)."""
    step = 1 << levels
    return m - m % step, k - k % step, n - n % step


def max_levels(m: int, k: int, n: int, leaf_min: int = 32) -> int:
    """The deepest recursion whose leaves keep every dimension at least leaf_min."""
    L = 0
    while L < MAX_LEVELS and min(m, k, n) >> (L + 1) >= leaf_min:
        L += 1
    return L


# ---------------------------------------------------------------------------------------------
# the planner's view


def normalise(shapes, options) -> dict:
    """batch, m, k, n of a (batched) a @ b; options: levels (None or 0..4), overwrite."""
    if len(shapes) not in (2, 3):
        raise ValueError(f"shapes: strassen_matmul takes the shapes (a, b[, c]), got {len(shapes)}")
    a, b = shapes[:2]
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"shapes: a and b must have at least 2 dimensions, got {a}, {b}")
    if a[-1] != b[-2]:
        raise ValueError(f"shapes: a's last dimension ({a[-1]}) must equal b's second-to-last "
                         f"({b[-2]})")
    batch = math.prod(max(x, y) for x, y in zip((1,) * (len(b) - len(a)) + tuple(a[:-2]),
                                                 (1,) * (len(a) - len(b)) + tuple(b[:-2])))
    m, k, n = int(a[-2]), int(a[-1]), int(b[-1])
    return {"batch": batch, "m": m, "k": k, "n": n, "flops": 2.0 * batch * m * n * k}


def _gemm_rate(prof, dtype, m, n, k, count, tile, kind, fraction=1.0, k0=None):
    """flop/s of `count` GEMMs m x k x n launched together: the profile's large-GEMM rate, cut by
    wave quantisation (GPU: output tiles over SMs) and by short inner dimensions (fraction < 1:
    the leaf kernel, whose rate falls faster with k)."""
    rate = prof.flops(dtype) * fraction
    if fraction < 1.0:
        rate *= k / (k + (LEAF_K0[dtype] if k0 is None else k0))
    if kind == "cuda":
        tiles = count * math.ceil(m / tile[0]) * math.ceil(n / tile[1])
        waves = math.ceil(tiles / prof.units)
        rate *= tiles / (waves * prof.units)
        rate *= k / (k + 64.0)  # prologue and epilogue of each tile's main loop
    else:
        # BLAS is slower on smaller blocks: fitted on the 2-core EPYC (2026-11-26: one level
        # 1.02-1.04x NumPy at N = 4096 and 8192, two levels 0.98x and 0.92x)
        rate *= min(m, n, k) / (min(m, n, k) + 512.0)
    return rate


# The CUDA leaf kernel's rate relative to the profile's vendor GEMM rate, measured on an H100
# SXM (2026-11-26, benchmarks/data/strassen_h100_2026-11-26b.json: the per-stage table's leaf
# launches and the FP32 cases): DMMA m16n8k8 FP64 31-37 TFLOP/s at k = 2048..8192 (the m8n8k4
# kernel before: 23-26), FFMA FP32 ~0.83 of cuBLAS.  Its rate also falls with the leaf's k
# faster than cuBLAS's: k / (k + LEAF_K0) on top (fitted on the leaves of k = 512..8192).
LEAF_FRACTION = {"float64": 0.67, "float32": 0.85}
LEAF_K0 = {"float64": 608.0, "float32": 256.0}
# The FP64 leaf on CUTLASS's sm_90 mainloop (builds with CUTLASS's headers; the fact
# "leaf_kernel" says which runs), fitted on the per-stage table of an H100 SXM run (2026-11-26c,
# benchmarks/data/strassen_h100_2026-11-26c.json, benchmarks/strassen_fit.py): its rate relative
# to the profile's FP64 GEMM rate, with no extra short-k term, and a leaf launch of more than 5 ms
# running up to 10 % slower by 20 ms (the sustained DMMA clock: one 8192^3 leaf 52.7 TFLOP/s
# against 55.4 for 4096^3).  Least squares gives 1.06; 1.02 keeps every launch within 0.93-1.09
# of the measured and every total within 0.98-1.06, and ranks "strassen" behind strassen_cublas
# at N = 12288 and 16384 as measured (1.5 % and 4 % behind; 1.06 ranked it ahead).
CUTLASS_LEAF_FRACTION = 1.02
CUTLASS_LEAF_K0 = 0.0
CUTLASS_SUSTAINED_DROP = 0.10
# The sum leaves of strassen_reloaded by how many operands are sums of 2 sources (each source
# has its own tiles to load and its fragments to add: 0.45-0.5 of cuBLAS, fitted on the same
# run's per-stage table at k = 2048..8192, with k / (k + 150)).
RELOADED_FRACTION = {0: 0.67, 1: 0.51, 2: 0.45}
RELOADED_K0 = 150.0


def _leaf_fraction(problem, name):
    """The leaf kernel's rate relative to the vendor GEMM and its k0 (measured; info may
    override the fraction)."""
    info = problem.info
    if name == "strassen_cublas" or problem.kind == "cpu":
        return 1.0, None
    if "leaf_fraction" in info:
        return info["leaf_fraction"].get(problem.dtype, 0.5), None
    if _cutlass_leaf(problem, name):
        return CUTLASS_LEAF_FRACTION, CUTLASS_LEAF_K0
    return LEAF_FRACTION.get(problem.dtype, 0.5), None


def _cutlass_leaf(problem, name):
    """Whether the leaves are the CUTLASS-mainloop kernel (FP64 CUDA, the fact "leaf_kernel")."""
    return (name == "strassen" and problem.kind == "cuda" and problem.dtype == "float64"
            and problem.info.get("leaf_kernel") == "cutlass"
            and "leaf_fraction" not in problem.info)


# cuBLAS's DGEMM on the H100 runs above the profile's rate in short calls (the FP64 tensor
# cores' clock before the power limit bites): in the 2026-11-26c run strassen_cublas at N = 4096
# (a 2.5 ms call) ran its 2048^3 products 14-18 % faster than predicted, 4096 at two levels
# (4 ms) 10-19 %, at 8192 (20 ms) 3-5 %, at 16384 as predicted (and cupy.matmul at 4096 6 %).
# The GEMMs of a call whose classical time at the profile's rate is T run (1 + gain) faster,
# gain = CUBLAS_SHORT_GAIN · clamp(log(T1 / T) / log(T1 / T0), 0, 1), (T0, T1) = CUBLAS_SHORT_T;
# the classical prediction alike (so the ranking of short calls is unchanged).  float64 only
# (measured there).  Refit on the 2026-11-27 run (strassen_fit.py --fit-cublas): 0.15 over
# 2.5-60 ms (its Winograd products at N = 8192 ran at 60 TFLOP/s, 2.29 ms each).
CUBLAS_SHORT_GAIN = 0.15
CUBLAS_SHORT_T = (2.5e-3, 60e-3)
# The first launch of a CUDA call waits for the host to issue it (the GPU idle since the call
# began): 50-90 us more than its kernel in the 2026-11-27 run's per-stage table (every first
# pass at N = 4096 and 8192).
FIRST_LAUNCH_S = 30e-6


# strassen_cublas's products whose sizes are not multiples of 128 ran slower than the model:
# 12000x9000x10000 FP64 at one level (products 6000x4500x5000) measured 0.984x cuBLAS against a
# predicted 1.066x (the 2026-11-27 run; the classical prediction of that shape within 0.1 %),
# while the power-of-two orders ran as predicted: their rate times CUBLAS_UNALIGNED.
CUBLAS_UNALIGNED = 0.92


def _aligned(*dims) -> float:
    return 1.0 if all(d % 128 == 0 for d in dims) else CUBLAS_UNALIGNED


def _first_launch(out: list, kind: str) -> list:
    if out and kind == "cuda":
        out[0] = (out[0][0], out[0][1] + FIRST_LAUNCH_S)
    return out


def short_call_gain(problem, prof) -> float:
    """The cuBLAS rate's gain in a short call (CUDA float64; 0 elsewhere)."""
    if problem.kind != "cuda" or problem.dtype != "float64" or CUBLAS_SHORT_GAIN == 0.0:
        return 0.0
    t = problem.info["flops"] / max(prof.flops(problem.dtype), 1.0)
    t0, t1 = CUBLAS_SHORT_T
    if t <= t0:
        return CUBLAS_SHORT_GAIN
    return CUBLAS_SHORT_GAIN * min(1.0, max(0.0, math.log(t1 / t) / math.log(t1 / t0)))


def launch_times(problem, prof, levels: int, name: str = "strassen") -> list:
    """[(what, seconds)] per launch of one batch element's schedule (passes at bandwidth, leaves at
    the GEMM rate of their size; strassen_cublas adds its M buffer and target pass; the first
    launch of a CUDA call its issue latency)."""
    return _first_launch(_launch_times(problem, prof, levels, name), problem.kind)


def _launch_times(problem, prof, levels: int, name: str = "strassen") -> list:
    info = problem.info
    s_e = _ITEMSIZE.get(problem.dtype, 8)
    m, k, n = info["m"], info["k"], info["n"]
    mc, kc, nc = core_sizes(m, k, n, levels)
    tile = tuple(info.get("leaf_tile", (128, 128)))
    fraction, k0 = _leaf_fraction(problem, name)
    launch = prof.launch_s if problem.kind == "cuda" else 0.0
    bw = prof.bandwidth
    # cuBLAS's GEMMs (strassen_cublas) in a short call: faster than the profile's rate
    gain = 1.0 + (short_call_gain(problem, prof) if name == "strassen_cublas" else 0.0)
    out = []
    # classical strips: bottom rows, right columns, the k remainder
    for mm, kk, nn in ((m - mc, k, n), (mc, k, n - nc), (mc, k - kc, nc)):
        if mm and kk and nn:
            rate = gain * _gemm_rate(prof, problem.dtype, mm, nn, kk, 1, tile, problem.kind,
                                     fraction, k0)
            c_rw = 1  # written once (beta reads it once more: small beside the GEMM)
            out.append(("strip", 2.0 * mm * nn * kk / rate + c_rw * mm * nn * s_e / bw + launch))
    if not (mc and kc and nc):
        return out
    if levels == 0:
        rate = gain * _gemm_rate(prof, problem.dtype, mc, nc, kc, 1, tile, problem.kind,
                                 fraction, k0)
        out.append(("leaf", 2.0 * mc * nc * kc / rate + 2.0 * mc * nc * s_e / bw + launch))
        return out
    if name == "strassen_reloaded":
        for op in reloaded_schedule(mc, kc, nc, levels):
            cnt = len(op.products)
            xs, ys = op.products[0][:2]
            sums = (len(xs) > 1) + (len(ys) > 1)
            rate = _gemm_rate(prof, problem.dtype, op.m, op.n, op.k, cnt, tile, problem.kind,
                              RELOADED_FRACTION[sums], RELOADED_K0)
            c_rw = sum(1 if t[3] else 2 for p in op.products for t in p[2])
            out.append((label(op), 2.0 * cnt * op.m * op.n * op.k / rate
                        + c_rw * op.m * op.n * s_e / bw + launch))
        return out
    private = not problem.options.get("overwrite")
    if winograd_applies(problem, name, levels):
        for op in winograd_schedule(mc, kc, nc, levels):
            if isinstance(op, WinogradSums):  # reads 4 quadrants, writes 4 sums, of A and of B
                nbytes = 8 * s_e * (op.mh * op.kh + op.kh * op.nh)
                out.append(("wsums", nbytes / bw + launch))
            elif isinstance(op, Combine):  # reads 4 quadrants of C, writes 3
                out.append(("combine", 7 * s_e * op.mh * op.nh / bw + launch))
            elif isinstance(op, AddInto):  # reads the scratch block and the target, writes it
                out.append(("add", 3 * s_e * op.m * op.n / bw + launch))
            else:  # straight into its C quadrant: written (fresh) or read and written
                rate = gain * _aligned(op.m, op.n, op.k) * _gemm_rate(
                    prof, problem.dtype, op.m, op.n, op.k, 1, tile, problem.kind)
                units = 1 if op.targets[0][3] else 2
                t = 2.0 * op.m * op.n * op.k / rate + units * op.m * op.n * s_e / bw + launch
                out.append((op.name, max(t, CUBLAS_HOST_S)))
        return out
    if private and name == "strassen_cublas" and problem.kind == "cuda" and levels == 1:
        for op in sums_schedule(mc, kc, nc):
            if isinstance(op, Sums):  # reads 4 quadrants, writes 5 sums, of A and of B
                nbytes = 9 * s_e * (op.mh * op.kh + op.kh * op.nh)
                out.append(("sums", nbytes / bw + launch))
                continue
            rate = gain * _aligned(op.m, op.n, op.k) * _gemm_rate(
                prof, problem.dtype, op.m, op.n, op.k, 1, tile, problem.kind)
            c_units = [1 if t[3] else 2 for t in op.targets]
            direct = len(op.targets) == 1
            units = c_units[0] if direct else 2 + sum(c_units)
            t = (2.0 * op.m * op.n * op.k / rate + units * op.m * op.n * s_e / bw
                 + launch * (1 if direct else 2))
            out.append((label(op), max(t, CUBLAS_HOST_S)))
        return out
    fused_copy = private and problem.kind == "cuda"  # the copy and the first S1 in one pass
    for i, op in enumerate((private_schedule if private else schedule)(mc, kc, nc, levels)):
        if isinstance(op, Pass):
            acc = 8 if fused_copy and i == 0 else PASS_ACCESSES[op.stage]
            nbytes = acc * len(op.blocks) * s_e * (op.mh * op.kh + op.kh * op.nh)
            out.append(("copy+S1" if fused_copy and i == 0 else label(op), nbytes / bw + launch))
            continue
        cnt = len(op.products)
        targets = sum(len(p[2]) for p in op.products)
        rate = gain * _gemm_rate(prof, problem.dtype, op.m, op.n, op.k, cnt, tile, problem.kind,
                                 fraction, k0)
        if name == "strassen_cublas":
            rate *= _aligned(op.m, op.n, op.k)
        t = 2.0 * cnt * op.m * op.n * op.k / rate
        if _cutlass_leaf(problem, name):  # its sustained clock in long launches
            t /= 1.0 - CUTLASS_SUSTAINED_DROP * min(1.0, max(0.0, (t - 5e-3) / 15e-3))
        c_rw = 1 if op.first else 2  # beta = 0 on the first write: C is not read
        if name == "strassen_cublas" or problem.kind == "cpu":
            # M written once, read once, each target read and written; a one-target cuBLAS
            # leaf goes straight into its C block (cuBLAS's beta: C's traffic only)
            for p in op.products:
                direct = name == "strassen_cublas" and problem.kind == "cuda" and len(p[2]) == 1
                units = c_rw if direct else 2 + len(p[2]) * c_rw
                t += units * op.m * op.n * s_e / bw + (0.0 if direct else launch)
            if name == "strassen_cublas" and problem.kind == "cuda":
                t = max(t, cnt * CUBLAS_HOST_S)
        else:
            t += targets * c_rw * op.m * op.n * s_e / bw  # the multi-target epilogue
        out.append((label(op), t + launch))
    return out


def winograd_applies(problem, name: str, levels: int) -> bool:
    """Whether strassen_cublas runs this call in Winograd's form: one or two levels, float64 or
    float32 on CUDA, default mode, C written fresh (no beta: the option "accumulate" false), the fact
    "winograd" (the knob KRONLINALG_STRASSEN_WINOGRAD).  Elsewhere one level takes the sums
    form and deeper ones the private copy with a product buffer, priced as such."""
    return (name == "strassen_cublas" and 1 <= levels <= MAX_WINOGRAD_LEVELS
            and problem.kind == "cuda" and problem.dtype in ("float32", "float64")
            and not problem.options.get("overwrite") and not problem.options.get("accumulate")
            and bool(problem.info.get("winograd", False)))


def _copies(problem, prof, name="strassen"):
    """Default mode copies a and b into the workspace: read + write each once (CPU; on CUDA
    the copy is fused with the first pass and priced there)."""
    info = problem.info
    if problem.options.get("overwrite") or name == "strassen_reloaded" or problem.kind == "cuda":
        return 0.0
    s_e = _ITEMSIZE.get(problem.dtype, 8)
    return 2.0 * info["batch"] * (info["m"] * info["k"] + info["k"] * info["n"]) * s_e / prof.bandwidth


def _levels_to_try(problem, name="strassen"):
    lv = problem.options.get("levels")
    info = problem.info
    if lv is not None:
        return (lv,)
    top = max_levels(info["m"], info["k"], info["n"], 256 if problem.kind == "cuda" else 128)
    if name == "strassen_reloaded":
        top = min(top, MAX_RELOADED_LEVELS)
    return tuple(range(1, top + 1)) or (1,)


def predict_strassen(problem, prof, name="strassen"):
    best = None
    for L in _levels_to_try(problem, name):
        times = launch_times(problem, prof, L, name)
        model = problem.info["batch"] * sum(t for _, t in times) + _copies(problem, prof, name)
        if best is None or model < best[1]:
            best = (L, model, times)
    L, model, times = best
    # the margin: a tie with the vendor GEMM is not worth Strassen's larger error
    forced = problem.options.get("levels") is not None
    seconds = model if forced else model * MARGIN
    is_pass = lambda w: w.startswith("S") or w in ("sums", "wsums", "combine", "add")  # noqa: E731
    passes = sum(t for w, t in times if is_pass(w))
    leaves = sum(t for w, t in times if not is_pass(w))
    return seconds, {"levels": L, "model_s": model, "margin": 1.0 if forced else MARGIN,
                     "launches": len(times),
                     "terms": {"passes": problem.info["batch"] * passes,
                               "leaves": problem.info["batch"] * leaves,
                               "copies": _copies(problem, prof, name)}}


def predict_strassen_reloaded(problem, prof):
    return predict_strassen(problem, prof, "strassen_reloaded")


def predict_strassen_cublas(problem, prof):
    return predict_strassen(problem, prof, "strassen_cublas")


# One long cuBLAS DGEMM runs below the short-GEMM rate on the H100 (the FP64 tensor cores'
# sustained clock; 2026-11-26b: 58 and 55 TFLOP/s at N = 4096 and 8192, 50.9 at 12288 and
# 16384): the classical prediction ramps down by up to 10 % from 20 to 60 ms.  Strassen's
# leaves, separated by bandwidth-bound passes, measured within 5 % of the short-GEMM rate.
DGEMM_SUSTAINED_DROP = 0.10
# strassen_cublas issues each leaf product from Python (a cuBLAS call and a target-update
# launch): host time a product, which bounds launches of small leaves.  It depends on the
# machine's host CPU: 33-42 us (2026-11-26b), ~22 us (2026-11-26c), 26 us fitted on the
# 2026-11-27 run (N = 4096, 3 levels, 512^3 leaves; strassen_fit.py --fit-cublas).
CUBLAS_HOST_S = 26e-6


def predict_classical(problem, prof):
    info = problem.info
    s_e = _ITEMSIZE.get(problem.dtype, 8)
    rate = _gemm_rate(prof, problem.dtype, info["m"], info["n"], info["k"], info["batch"],
                      (128, 128), problem.kind)
    t = info["flops"] / max(rate, 1.0) / (1.0 + short_call_gain(problem, prof))
    if problem.kind == "cuda" and problem.dtype == "float64":
        t /= 1.0 - DGEMM_SUSTAINED_DROP * min(1.0, max(0.0, (t - 0.02) / 0.04))
    nbytes = info["batch"] * (info["m"] * info["k"] + info["k"] * info["n"]
                              + 2 * info["m"] * info["n"]) * s_e
    seconds = max(t, nbytes / prof.bandwidth) + prof.launch_s
    return seconds, {"levels": 0, "terms": {"gemm": t, "mem": nbytes / prof.bandwidth}}


def msmes_reference(N: int, levels: int, prof, dtype: str = "float64") -> float:
    """MSMES's bound T >= max(T_flop, T_gmop, T_smop) per level, summed (kept for reference: its
    single max() does not hold when the passes are separate kernels)."""
    s_e = _ITEMSIZE.get(dtype, 8)
    smem = prof.B_sm * prof.units * prof.clock_hz
    return msmes_time(N, levels, tau=prof.flops(dtype), gmem_bw=prof.bandwidth, smem_bw=smem,
                      s_e=s_e)
