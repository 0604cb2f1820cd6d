"""kron_matmul's candidates: the sliced kernel and the shuffle algorithm, on CPU and CUDA.

Every predictor is a sum of physical terms, each in seconds at the device's nominal rates
(bytes over the measured bandwidth, flops over the measured GEMM rate, calls times the call
overhead), weighted by a coefficient: seconds = Σ coef[term] · term.  The coefficients say how
far a kernel is from the nominal rate (2.0 = half the bandwidth); their defaults come from
benchmarks/planner_quality.py --tune and a calibration may store device-specific ones
(profile.coef[family]).  A term that does not apply is simply 0.

Shapes are read in the right-hand form rows @ kron(G): a left product (F1 ⊗ … ⊗ FN) @ x runs
as xᵀ @ kron(F1ᵀ, …, FNᵀ), so its factors enter transposed and its rows are x's columns.
"""

from __future__ import annotations

import math


__all__ = ["normalise", "terms", "coefficients", "kron_flops", "predictor", "cuda_flops", "DEFAULT_COEF",
           "FAMILIES"]

from ...common.dtypes import ITEMSIZE as _ITEMSIZE
from . import load_coefficients


def normalise(shapes, options) -> dict:
    """Sizes of a kron_matmul problem from (x.shape, F1.shape, …, FN.shape)."""
    side = options.get("side", "right")
    if side not in ("right", "left"):
        raise ValueError(f"side: expected 'right' or 'left', got {side!r}")
    if len(shapes) < 2:
        raise ValueError("shapes: expected x's shape followed by at least one factor shape, "
                         f"got {len(shapes)} shape(s)")
    x, fshapes = shapes[0], shapes[1:]
    for i, f in enumerate(fshapes):
        if len(f) != 2 or min(f) < 1:
            raise ValueError(f"shapes: factor {i} must be a (P, Q) shape with P, Q >= 1, got {f}")
    if side == "right":
        factors = [(p, q) for p, q in fshapes]
    else:
        factors = [(q, p) for p, q in fshapes]
    k_in = math.prod(p for p, _ in factors)
    if len(x) == 0:
        raise ValueError("shapes: x must have at least one dimension")
    if side == "right":
        if x[-1] != k_in:
            raise ValueError(f"shapes: x's last dimension must be prod(P_i) = {k_in}, got {x}")
        rows = math.prod(x[:-1])
    elif len(x) == 1:
        if x[0] != k_in:
            raise ValueError(f"shapes: x's length must be prod(Q_i) = {k_in}, got {x}")
        rows = 1
    else:
        if x[-2] != k_in:
            raise ValueError(f"shapes: x's dimension -2 must be prod(Q_i) = {k_in}, got {x}")
        rows = math.prod(x[:-2]) * x[-1]
    lengths = row_lengths(factors)
    return {"M": rows, "factors": factors, "lengths": lengths, "side": side,
            "flops": kron_flops(rows, factors), "N": len(factors)}


def row_lengths(factors) -> list:
    """Row length before each factor is applied (factors apply last first), then after all."""
    lengths, cur = [], math.prod(p for p, _ in factors)
    for p, q in reversed(factors):
        lengths.append(cur)
        cur = cur // p * q
    lengths.append(cur)
    return lengths


def kron_flops(rows, factors) -> float:
    """Flops of rows @ kron(F1..FN) by the sliced multiply: 2 * rows * sum_i L_i * Q_i, with L_i
    the row length when factor i is applied (last first).  factors: (P, Q) shapes."""
    lengths = row_lengths(factors)
    return sum(2.0 * rows * n * q for n, (_, q) in zip(lengths, reversed(factors)))


# ---------------------------------------------------------------------------------------------
# terms, per candidate family


def _split(nbytes, working_set, prof):
    """(bytes served on chip, bytes through DRAM) of an operation touching `working_set` bytes:
    whatever fits the caches (profile.cache_bytes) stays there between operations."""
    return (nbytes, 0.0) if working_set <= prof.cache_bytes else (0.0, nbytes)


def _pass_bytes(info, passes, s_e):
    """Bytes read and written by `passes` memory passes: x in, the result out, and in between
    intermediates whose length we take as the mean of the lengths between factors (the passes'
    boundaries are the kernel's business)."""
    lengths = info["lengths"]
    inner = lengths[1:-1]
    mid = sum(inner) / len(inner) if inner else 0.0
    return info["M"] * s_e * (lengths[0] + lengths[-1] + 2.0 * (passes - 1) * mid)


def _cpu_passes(info, s_e):
    """The CPU kernel's passes, as lists of factor indices (applied last first), as the kernel
    plans them: info["cpu_pass_counts"] (factors per pass, a fact the operation asks the kernel
    for: its grouping depends on the row length each pass sees)."""
    counts = info.get("cpu_pass_counts") or [1] * len(info["factors"])
    groups, end = [], len(info["factors"])
    for n in counts:
        groups.append(list(range(end - 1, end - n - 1, -1)))
        end -= n
    return groups


def _lane_use(n, lanes):
    """Fraction of SIMD lanes doing useful work when n instances are spread over them."""
    return n / (lanes * math.ceil(n / lanes)) if n else 1.0


def _cpu_sliced(problem, s_e, prof):
    """The CPU kernel (kernels/kron/kron_cpu_impl.hpp): per pass, tiles of LW block instances
    (one per SIMD lane) are gathered, transformed factor by factor in cache, and scattered.

    Lanes run along the axis whose outputs are contiguous when it is long enough, else along the
    longest axis (its TileMap); idle lanes still compute.  Gathers and scatters are vector moves
    or register transposes when lanes are contiguous, element by element otherwise.  A left
    product's result is laid out like x (kron.py: x row-major gives a result whose rows of xᵀ
    are contiguous), so its outputs are a right product's; only the first pass gathers x's
    columns element by element."""
    info, dtype = problem.info, problem.dtype
    M, factors, lengths = info["M"], info["factors"], info["lengths"]
    x = problem.shapes[0]
    cols = x[-1] if info["side"] == "left" and len(x) > 1 else 1
    left = cols > 1  # one column: elements contiguous, exactly a right product's layout
    lanes = max(1, 2 * (prof.simd_bytes or 32) // s_e)
    rate = prof.flops(dtype)
    groups = _cpu_passes(info, s_e)
    n_in = lengths[0]
    moved = cached = scalar_in = scalar_out = flops = steps = steps_l2 = 0.0
    for first, g in zip([True] + [False] * len(groups), groups):
        b_in = math.prod(factors[i][0] for i in g)
        b_out = math.prod(factors[i][1] for i in g)
        S = n_in // b_in
        n_out = S * b_out
        # axes (instances, output stride is 1): right products j (S), left products the columns;
        # a pass over whole rows (S == 1) puts the rows on the lanes and, with AVX-512, stores
        # them through register transposes
        whole_rows = S == 1 and M >= lanes and prof.simd_bytes == 64
        on_prefixes = 4 * S >= 3 * lanes  # the kernel's TileMap rule
        contiguous = S if on_prefixes else (M if whole_rows else 0)
        along = S if on_prefixes else max(M, S)
        use = _lane_use(along, lanes)
        nbytes = M * (n_in + n_out) * s_e
        c, d = _split(nbytes, nbytes, prof)
        cached, moved = cached + c, moved + d
        if not contiguous:  # outputs stored element by element
            scalar_out += M * n_out * s_e
        if left and first:  # x's columns gathered element by element
            scalar_in += M * n_in * s_e
        # Each step streams a tile's block (lanes × block length) in and out: from L1 when the
        # two ping-pong blocks fit there, from L2 otherwise.  Idle lanes cost like busy ones:
        # flops and step traffic are divided by the fraction of lanes in use.
        pass_flops, size, traffic, block = 0.0, b_in, 0.0, b_in
        for i in g:
            p, q = factors[i]
            pass_flops += 2.0 * M * S * size * q
            traffic += M * S * (size + size // p * q) * s_e
            size = size // p * q
            block = max(block, size)
        if 2 * block * lanes * s_e <= prof.l1_bytes:
            steps += traffic / use
        else:
            steps_l2 += traffic / use
        flops += pass_flops / use
        n_in = n_out
    return {"mem": moved / prof.bandwidth, "cache": cached / prof.bandwidth,
            "scalar_in": scalar_in / prof.bandwidth, "scalar_out": scalar_out / prof.bandwidth,
            "steps": steps / prof.bandwidth,
            "steps_l2": steps_l2 / prof.bandwidth,
            "flop": flops / rate,
            "factors": len(factors) * prof.launch_s,  # packing each factor, per-step set-up
            "call": prof.launch_s}, {"passes": len(groups)}


def _shuffle_parts(info, s_e, prof):
    """Bytes and flops of the shuffle: GEMM traffic and transpose copies, each split into what
    stays on chip and what goes through DRAM, and the number of library calls."""
    M, factors, lengths = info["M"], info["factors"], info["lengths"]
    g = {"gemm_cache": 0.0, "gemm_mem": 0.0, "transpose_cache": 0.0, "transpose": 0.0}
    flops, calls = 0.0, 0

    def add(kind, nbytes):
        c, d = _split(nbytes, nbytes, prof)
        g[kind + "_cache"] += c
        g[kind if kind == "transpose" else kind + "_mem"] += d

    for n, (p, q) in zip(lengths, reversed(factors)):
        rows = M * (n // p)
        add("gemm", rows * (p + q) * s_e)
        flops += 2.0 * rows * p * q
        calls += 1
        if n // p > 1 and q > 1:  # (m, s, q) -> (m, q, s) is a copy unless s or q is 1
            add("transpose", 2.0 * rows * q * s_e)
            calls += 1
    if info["side"] == "left" and M > 1:  # rows = xᵀ: one more transposing copy in, none out
        add("transpose", 2.0 * M * lengths[0] * s_e)
        calls += 1
    return g, flops, calls


def _cpu_shuffle(problem, s_e, prof):
    g, flops, calls = _shuffle_parts(problem.info, s_e, prof)
    terms = {k: v / prof.bandwidth for k, v in g.items()}
    terms.update(gemm_flop=flops / prof.flops(problem.dtype), calls=calls * prof.launch_s,
                 call=prof.launch_s)
    return terms, {"library_calls": calls}


def _simt_flops(prof, dtype):
    """CUDA-core FMA rate (the naive sliced kernel does not use tensor cores)."""
    lanes = 64 if prof.cc and (prof.cc[0] < 8 or tuple(prof.cc) == (8, 0)) else 128
    rate = prof.units * lanes * 2.0 * prof.clock_hz
    if dtype == "float64":
        full = prof.cc and tuple(prof.cc) in ((6, 0), (7, 0), (8, 0), (9, 0))
        rate = rate / 2 if full else rate / 64
    return rate


# The natural-order tensor-core kernels' factor sizes (kron_cuda_natural*.cuh): P x P factors.
_NATURAL_P = (8, 16, 32, 64)


def cuda_flops(prof, dtype, factors, fp32_mode):
    """Flop rate of the fused CUDA kernels: CUDA-core FMAs, except on tensor cores
    (kron_cuda.cu pick_kernel / natural_kernel):

    * float32 in the 3xTF32 mode (kron.float32_precision) when every P is a multiple of 8 and
      every Q at least 16: three TF32 products per product, a third of the TF32 rate;
    * float64 on sm_90 and newer when every factor is P x P with P in 8, 16, 32, 64 (the
      natural-order kernel on DMMA), the FP64 tensor-core rate;
    * float16 / bfloat16 when every P is a multiple of 8, their tensor-core rate;

    never below the CUDA-core rate they replace."""
    simt = _simt_flops(prof, dtype)
    rate = prof.units * prof.clock_hz
    if dtype == "float64":
        dmma = (prof.cc and tuple(prof.cc) >= (9, 0)
                and all(p == q and p in _NATURAL_P for p, q in factors))
        return max(simt, prof.tc_ops.get("fp64", 0.0) * rate) if dmma else simt
    if dtype in ("float16", "bfloat16"):
        if any(p % 8 for p, _ in factors):
            return simt
        return max(simt, prof.tc_ops.get("fp16" if dtype == "float16" else "bf16", 0.0) * rate)
    if dtype != "float32" or any(p % 8 or q < 16 for p, q in factors) or fp32_mode != "tf32x3":
        return simt
    return max(simt, prof.tc_ops.get("tf32", 0.0) * rate / 3.0)


def _cuda_plan(problem):
    """(passes, fused) of the compiled CUDA plan: info["cuda_plan"], which the operation asks
    the fused kernels for (kron_cuda.config); absent (no CUDA build, or no GPU to ask), one
    launch per factor, the unfused kernel."""
    info = problem.info
    return info.get("cuda_plan") or (len(info["factors"]), False)


def _cuda_sliced(problem, s_e, prof):
    """The CUDA sliced multiply: `passes` launches, each streaming the rows through memory
    (DRAM, or L2 when they fit), the factor slices read from on-chip memory.

    Fused kernels (shared-memory tiles) read each slice from shared memory: B_sm bytes/cycle/SM,
    the calibrated KAMI parameter.  The unfused kernel reads slices straight from global memory:
    consecutive threads take slices P elements apart, so one warp load touches min(32, P·s_e/4)
    128-byte lines (L1 serves one per cycle); column layouts (left products with many columns)
    are coalesced instead (s_e/4 lines)."""
    info, dtype = problem.info, problem.dtype
    M, factors, lengths = info["M"], info["factors"], info["lengths"]
    passes, fused = _cuda_plan(problem)
    moved = _pass_bytes(info, passes, s_e)
    cached, dram = _split(moved, M * s_e * (lengths[0] + max(lengths[1:])), prof)
    cycles = prof.units * prof.clock_hz  # SM-cycles per second
    coalesced = info["side"] == "left" and M >= 32
    on_chip = lines = 0.0
    for n, (p, q) in zip(lengths, reversed(factors)):
        outputs = M * (n // p) * q
        on_chip += outputs * p * s_e
        if not fused:
            per_load = s_e / 4.0 if coalesced else min(32.0, max(1.0, p * s_e / 4.0))
            lines += outputs / 32.0 * p * per_load
    return {"mem": dram / prof.bandwidth, "cache": cached / prof.bandwidth,
            "smem": on_chip / (prof.B_sm * cycles) if fused else 0.0,
            "l1": lines / cycles,
            "flop": info["flops"] / (cuda_flops(prof, dtype, factors,
                                                 info.get("fp32_mode", "tf32x3")) if fused
                                     else _simt_flops(prof, dtype)),
            "launches": passes * prof.launch_s, "call": prof.launch_s}, \
        {"passes": passes, "fused": fused}


def _cuda_shuffle(problem, s_e, prof):
    g, flops, calls = _shuffle_parts(problem.info, s_e, prof)
    terms = {k: v / prof.bandwidth for k, v in g.items()}
    terms.update(gemm_flop=flops / prof.flops(problem.dtype), launches=calls * prof.launch_s,
                 call=prof.launch_s)
    return terms, {"kernels": calls}


FAMILIES = {
    "kron_matmul/sliced/cpu": _cpu_sliced,
    "kron_matmul/shuffle/cpu": _cpu_shuffle,
    "kron_matmul/sliced/cuda": _cuda_sliced,
    "kron_matmul/shuffle/cuda": _cuda_shuffle,
}

# Coefficients: data, kron.json beside this file (how they were fitted: its "_comment").
DEFAULT_COEF = load_coefficients(__file__)


def terms(family, problem, prof):
    """(terms in seconds at nominal rates, extra details) of one candidate family."""
    return FAMILIES[family](problem, _ITEMSIZE.get(problem.dtype, 4), prof)


def coefficients(family, prof) -> dict:
    return {**DEFAULT_COEF[family], **prof.coef.get(family, {})}


def predictor(family):
    """The cost function of one candidate family: seconds = Σ coef[term] · term."""
    def predict(problem, prof):
        t, details = terms(family, problem, prof)
        coef = coefficients(family, prof)
        seconds = sum(coef.get(k, 1.0) * v for k, v in t.items())
        return seconds, {**details, "terms": {k: coef.get(k, 1.0) * v for k, v in t.items() if v}}

    predict.__name__ = "predict_" + family.replace("/", "_")
    return predict
