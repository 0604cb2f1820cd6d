"""structured_matmul's cost model: the normaliser, the physical terms of each candidate family
and their fitted coefficients (structured.json beside this file).

Every predictor is a sum of terms in seconds at the device's nominal rates, each weighted by a
coefficient (how far that kernel sits from the rate).  What the CUDA kernel decides for a
pattern (its tile shape, whether it runs the pipelined tensor-core form) reaches these terms as
facts in the problem's info (``info["cuda_tiles"]``), asked of the kernel's launcher by the
operation (kronlinalg.structured); where no fact is given (no CUDA build), the tile rules below
stand in.  Pure shape predicates shared with the cuBLAS algorithms (planar copies, 32-bit
GEMM sizes, where strided/block_dense pay) live here too: one statement of each.
"""

from __future__ import annotations

import math

from ...common import validation
from ...common.dtypes import ITEMSIZE as _ITEMSIZE
from . import load_coefficients

__all__ = ["normalise", "predictor", "DEFAULT_COEF", "LAYOUTS", "INT_MAX", "strided_fits",
           "planar", "dense_slabs", "strided_pays", "block_dense_pays", "strided_all_fit",
           "strided_lds", "strided_applies", "block_dense_applies", "coefficients", "FAMILIES"]

LAYOUTS = ("batch_first", "batch_last")
INT_MAX = 2**31 - 1  # cuBLAS's 32-bit sizes and leading dimensions
_pattern = validation.pattern


def normalise(shapes, options) -> dict:
    """Sizes of a structured_matmul problem from (x.shape, pattern of K1, …, pattern of KL)."""
    layout = options.get("layout", "batch_first")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    if len(shapes) < 2:
        raise ValueError("shapes: expected x's shape followed by at least one pattern (a, b, c, d)")
    x, patterns = tuple(shapes[0]), [_pattern(f"shapes[{t + 1}]", p)
                                    for t, p in enumerate(shapes[1:])]
    for t in range(len(patterns) - 1):
        (a, _, c, d), (a2, b2, _, d2) = patterns[t], patterns[t + 1]
        if a * c * d != a2 * b2 * d2:
            raise ValueError(f"shapes: pattern {t} has {a * c * d} columns but pattern {t + 1} "
                             f"has {a2 * b2 * d2} rows")
    a, _, c, d = patterns[-1]
    if not x:
        raise ValueError("shapes: x must have at least one dimension")
    if layout == "batch_first":
        if x[-1] != a * c * d:
            raise ValueError(f"shapes: x's last dimension must be {a * c * d}, got {x}")
        rows = math.prod(x[:-1])
    else:
        if x[0] != a * c * d:
            raise ValueError(f"shapes: x's first dimension must be {a * c * d}, got {x}")
        rows = math.prod(x[1:])
    flops = sum(2.0 * rows * math.prod(p) for p in patterns)
    packed = options.get("packed", False)
    if not isinstance(packed, bool):
        raise TypeError(f"packed: expected a bool, got {type(packed).__name__}")
    return {"B": rows, "patterns": patterns, "layout": layout, "flops": flops, "packed": packed}


def _io_elems(B, p):
    a, b, c, d = p
    return B * a * d * (b + c) + a * b * c * d  # X in, Y out, K once


def _permutes(B, p, layout):
    """Elements the bmm algorithm copies to bring the (i, j) blocks together and back."""
    a, b, c, d = p
    if a * d == 1:
        return 0.0
    moved = 0.0
    if layout == "batch_first":
        trivial = B == 1 or d == 1 and a == 1
        moved = 0.0 if trivial else 2.0 * B * a * d * (b + c)
    elif d > 1:
        moved = 2.0 * B * a * d * (b + c)
    return moved


def _kernel_terms(info, s_e, prof, dtype):
    if prof.kind != "cpu":
        return _kernel_cuda_terms(info, s_e, prof, dtype)
    B, layout = info["B"], info["layout"]
    mem = sum(_io_elems(B, p) for p in info["patterns"]) * s_e / prof.bandwidth
    rate = prof.flops(dtype)
    flop = sum(2.0 * B * math.prod(p) * _waste(p, layout, prof.kind) for p in info["patterns"])
    return {"mem": mem, "flop": flop / rate, "calls": len(info["patterns"]) * prof.launch_s}


def _waste(p, layout, kind) -> float:
    """Work the CPU kernel's vector lanes do on padding, as a factor >= 1 (the CUDA kernel's
    tiles are counted in _kernel_cuda_terms)."""
    a, b, c, d = p
    if layout == "batch_first":
        lanes = 16
        return math.ceil(b * d / lanes) * lanes / (b * d)
    return 1.0


def _cuda_tile_estimate(p, s_e, fp32_mode) -> tuple:
    """(TN, TK, TL, TJ, pipelined) where the launcher cannot be asked (a build without the CUDA
    kernels planning for a GPU): a typical tile, not a copy of the launcher's rules, which
    info["cuda_tiles"] carries whenever the extension is built (kl_ks_cuda_tile)."""
    d = p[3]
    pipelined = p[2] % 8 == 0 and (s_e == 2 or fp32_mode == "tf32x3")
    tj = next(t for t in (8, 4, 2, 1) if d % t == 0) if d < 8 or d % 8 == 0 else 8
    return (128, 64, 16 if pipelined else 8, tj, pipelined)


def _kernel_cuda_terms(info, s_e, prof, dtype):
    """The one-pass CUDA kernel, per factor: DRAM traffic (X and Y once, K once); the flops of
    the padded tiles at the CUDA-core FMA peak (float32) or at a quarter of the GEMM rate (half
    types: mma.sync fed from shared memory); the same flops again where the loads cannot be
    16-byte vectors (d % 4 != 0 and the like: element-by-element gathers); per tile, its
    pipeline fill and epilogue (the flops of a 16-deep l chunk of the tile); L2 → SM traffic
    (X re-read once per k tile, K once per batch tile; runs shorter than a 32-byte sector cost a
    sector); launches."""
    B, first = info["B"], info["layout"] == "batch_first"
    mode = info.get("fp32_mode", "tf32x3")
    # pattern -> (TN, TK, TL, TJ, pipelined): the launcher's own choice (the operation asks it)
    facts = info.get("cuda_tiles") or {}
    half = s_e == 2
    simt = prof.units * 128 * 2.0 * prof.clock_hz  # CUDA-core FMA peak
    # float32 on the pipelined kernel: three TF32 products per product (a third of the tensor
    # cores' TF32 rate, never below the CUDA-core peak it replaces)
    tf32x3 = max(simt, prof.tc_ops.get("tf32", 0.0) * prof.units * prof.clock_hz / 3.0)
    vec = 16 // s_e
    t = dict.fromkeys(("mem", "flop", "unaligned", "tiles", "l2", "interleaved", "calls"), 0.0)
    for p in info["patterns"]:
        a, b, c, d = p
        tn, tk, tl, tj, pipelined = facts.get(p) or _cuda_tile_estimate(p, s_e, mode)
        nn, nk, nl, nj = (math.ceil(B / tn), math.ceil(b / tk), math.ceil(c / tl),
                          math.ceil(d / tj))
        tiles = a * nj * nn * nk
        chunk = 2.0 * tn * tk * tj * tl  # flops of one l chunk of one tile
        rate = (prof.flops(dtype) / 4.0 if half
                else tf32x3 if pipelined else simt)
        t["mem"] += _io_elems(B, p) * s_e / prof.bandwidth
        t["flop"] += tiles * nl * chunk / rate
        # narrow loads: runs of fewer than 4 j outside the whole-d spans (the pipelined kernel),
        # not 16-byte vectors (the others)
        narrow = (tj < 4 and d not in (1, 2, 3, 6)) if pipelined else not (
            tj == d or (d % tj == 0 and tj % vec == 0))
        if narrow:
            t["unaligned"] += tiles * nl * chunk / rate
        # (per tile: its fill and epilogue, which scale with the output tile, not with TL)
        t["tiles"] += tiles * 2.0 * tn * tk * tj * 16 / rate
        sector = max(1.0, 32.0 / (tj * s_e)) if nj > 1 else 1.0
        x_reads = B * a * c * d * nk * (sector if first else 1.0)
        t["l2"] += (x_reads + a * b * c * d * nn * sector) * s_e / prof.bandwidth
        # a margin where the kernel's times are least predictable, the half types' batch_first X
        # with d > 1 (transposed on its way to the per-j tiles, against a dense GEMM that runs
        # d× the flops at the tensor cores' rate): the product's X and Y moved once more at the
        # DRAM rate, left out of the fit and added on top (benchmarks/structured_fit.py, FIXED)
        if half and first and d > 1:
            t["interleaved"] += B * a * d * (b + c) * s_e / prof.bandwidth
    t["calls"] = len(info["patterns"]) * prof.launch_s
    return t


# A library GEMM's fixed cost per output tile (its pipeline fill and epilogue, which a shallow
# reduction does not amortise): priced as a 128 x 128 tile's flops over a reduction of 64.
_GEMM_TILE_FLOPS = 2.0 * 128 * 128 * 64


def _gemm_tiles(rows, cols) -> int:
    return math.ceil(rows / 128) * math.ceil(cols / 128)


def _bmm_terms(info, s_e, prof, dtype):
    """Batched GEMM (bytes, flops at the GEMM rate), the permutes' copies, launches.  On CUDA
    the batch_first permutes are transposes at stride d (X's (B, c, d) → (d, B, c) and back):
    every element read or written at stride d moves a part of a 32-byte sector ("transpose")."""
    B, layout = info["B"], info["layout"]
    io = sum(_io_elems(B, p) for p in info["patterns"])
    perm = sum(_permutes(B, p, layout) for p in info["patterns"])
    calls = sum(1 if p[0] * p[3] == 1 else 3 for p in info["patterns"])
    tiles = sum(p[0] * p[3] * _gemm_tiles(B, p[1]) for p in info["patterns"])
    t = {"gemm_mem": io * s_e / prof.bandwidth, "gemm_flop": info["flops"] / prof.flops(dtype),
         "gemm_tiles": tiles * _GEMM_TILE_FLOPS / prof.flops(dtype),
         "permute": perm * s_e / prof.bandwidth, "calls": calls * prof.launch_s}
    if prof.kind != "cpu":
        strided = sum(_permutes(B, p, layout) * min(p[3] * s_e, 32)
                      for p in info["patterns"] if layout == "batch_first" and p[3] > 1)
        t["transpose"] = strided / prof.bandwidth
        # batch_last with a == 1: X's permute is a strided view that a library's batched GEMM
        # may take without a copy (torch does): its copy gets a coefficient of its own
        view = sum(B * p[3] * p[2] for p in info["patterns"]
                   if layout == "batch_last" and p[0] == 1 and p[3] > 1)
        t["permute"] -= view * s_e / prof.bandwidth
        t["permute_view"] = view * s_e / prof.bandwidth
    return t


def _dense_terms(info, s_e, prof, dtype):
    B, pats = info["B"], info["patterns"]
    M = pats[0][0] * pats[0][1] * pats[0][3]
    N = pats[-1][0] * pats[-1][2] * pats[-1][3]
    sizes = [p[0] * p[1] * p[3] for p in pats] + [N]  # rows of each factor, then N
    # forming K: a factor with a·d > 1 is its values times the support mask (written, read, and
    # written again by the reshape), ~3 library calls; one with a = d = 1 is a view of its
    # values; a chain adds a matmul (~3 calls' host time) per extra factor
    # (packed: K formed once, before the call)
    masked = [t for t, p in enumerate(pats) if p[0] * p[3] > 1 and not info["packed"]]
    chained = range(1, 1 if info["packed"] else len(pats))
    build = sum(sizes[t] * sizes[t + 1] for t in masked)
    build += sum(M * sizes[t + 1] for t in chained)
    chain = sum(2.0 * M * sizes[t] * sizes[t + 1] for t in chained)
    return {"gemm_mem": (B * (M + N) + M * N) * s_e / prof.bandwidth,
            "gemm_flop": (2.0 * B * M * N + chain) / prof.flops(dtype),
            "gemm_tiles": _gemm_tiles(B, M) * _GEMM_TILE_FLOPS / prof.flops(dtype),
            "build": 3.0 * build * s_e / prof.bandwidth,
            "calls": (2 + 3 * len(pats)) * prof.launch_s,
            "build_calls": (3 * len(masked) + 3 * len(chained)) * prof.launch_s}


def _strided_loops(p, layout) -> int:
    """cuBLAS calls of one factor (_strided_calls): one per value of the smaller of a and d
    (batch_last with d > 1), else one."""
    return min(p[0], p[3]) if layout == "batch_last" and p[3] > 1 else 1


def _strided_terms(info, s_e, prof, dtype):
    """cuBLAS strided-batched GEMMs: x and y once, K transposed (read, written, read), the
    GEMMs' flops and per-tile cost as for bmm, the transposing copy and the GEMM calls; where
    x and y go through planar copies (batch_first, d > 1), each read and written once more and
    two launches ("planar").  Packed: K transposed once, before the call."""
    B, pats, layout = info["B"], info["patterns"], info["layout"]
    per_call = not info["packed"]
    elems = sum(_io_elems(B, p) + (2 * math.prod(p) if p[3] > 1 and per_call else 0)
                for p in pats)
    tiles = sum(p[0] * p[3] * _gemm_tiles(B, p[1]) for p in pats)
    planars = [p for p in pats if planar(p, layout)]
    calls = (sum(_strided_loops(p, layout) + (p[3] > 1 and per_call) for p in pats)
             + 2 * len(planars))
    moved = sum(_permutes(B, p, layout) for p in planars)  # the same copies as bmm's
    return {"gemm_mem": elems * s_e / prof.bandwidth,
            "gemm_flop": info["flops"] / prof.flops(dtype),
            "gemm_tiles": tiles * _GEMM_TILE_FLOPS / prof.flops(dtype),
            "planar": moved * s_e / prof.bandwidth,
            "calls": calls * prof.launch_s}


def _block_dense_terms(info, s_e, prof, dtype):
    """Each factor's diagonal blocks formed dense (read K, write a·b·c·d² elements, one launch
    where d > 1), then one strided-batched GEMM of the pattern _dense_slabs: x and y once, the
    dense blocks read, d times the flops, its per-tile cost as for bmm.  Packed: the blocks
    formed once, before the call."""
    B, pats = info["B"], info["patterns"]
    dense = [dense_slabs(p) for p in pats]
    flops = sum(2.0 * B * math.prod(p) for p in dense)
    formed = sum(math.prod(p) * (1 + p[3]) for p in pats if p[3] > 1 and not info["packed"])
    return {"gemm_mem": sum(_io_elems(B, p) for p in dense) * s_e / prof.bandwidth,
            "gemm_flop": flops / prof.flops(dtype),
            "gemm_tiles": sum(p[0] * _gemm_tiles(B, p[1]) for p in dense) * _GEMM_TILE_FLOPS
            / prof.flops(dtype),
            "densify": formed * s_e / prof.bandwidth,
            "calls": sum(1 + (p[3] > 1 and not info["packed"]) for p in pats) * prof.launch_s}


FAMILIES = {"kernel": _kernel_terms, "strided": _strided_terms, "block_dense": _block_dense_terms,
             "bmm": _bmm_terms,
             "dense": _dense_terms}

# ---------------------------------------------------------------------------------------------
# shape predicates shared with the cuBLAS algorithms (kronlinalg/structured_cublas.py)


def strided_fits(pattern, layout, rows, ldx, ldy) -> bool:
    """Whether one factor's blocks are strided-batched GEMMs of 32-bit sizes: batch_last (block
    (i, j) of x is rows i·c·d + j + l·d, each contiguous along the batch), batch_first with d = 1
    (blocks are column ranges of x's rows), or batch_first with d > 1 on planar copies of x and
    y ((a·d, B, c) and (a·d, B, b), see _planar)."""
    a, b, c, d = pattern
    if layout == "batch_last":
        lead = d * max(ldx, ldy)
    else:
        lead = max(ldx, ldy) if d == 1 else max(b, c)
    return max(rows, b, c, lead, a * d) <= INT_MAX


def planar(pattern, layout) -> bool:
    """Whether the strided algorithm copies x and y to planar order for this factor: batch_first
    with d > 1, where a row of x holds the blocks interleaved as (i, l, j) and no GEMM can read
    block (i, j) in place.  One launch copies x to (a, d, B, c), the GEMMs read that, and one
    launch copies their (a, d, B, b) result into y's rows."""
    return layout == "batch_first" and pattern[3] > 1


def dense_slabs(pattern) -> tuple:
    """The pattern of a factor's a diagonal blocks formed dense ("block_dense"): (a, b·d, c·d, 1),
    whose rows and columns are the factor's own (k·d + j, l·d + j')."""
    a, b, c, d = pattern
    return (a, b * d, c * d, 1)


def strided_pays(p, layout) -> bool:
    """A factor where the strided GEMMs save bmm's permutes: batch_last with d > 1, batch_first
    with d = 1 < a (elsewhere bmm's batched matmul already reads views: the same GEMMs), and
    batch_first with d > 1, whose planar copies are one launch each way where bmm's permutes
    are a library's strided copies."""
    return p[3] > 1 if layout == "batch_last" else p[3] > 1 or p[0] > 1


def strided_all_fit(patterns, layout, rows) -> bool:
    """Every factor's strided GEMMs of 32-bit sizes (contiguous x and y)."""
    info = {"B": rows, "layout": layout}
    return all(strided_fits(p, layout, rows, *strided_lds(p, info)) for p in patterns)


def strided_applies(info) -> bool:
    """The shapes the strided algorithm runs: every factor's GEMMs of 32-bit sizes (the build
    and device are the operation's to check; where it pays is the predictor's)."""
    return strided_all_fit(info["patterns"], info["layout"], info["B"])


def block_dense_pays(p) -> bool:
    """A factor whose dense diagonal blocks are a GEMM of fewer flops than dense's: a > 1 (for
    a = 1 the block is the dense matrix, dense's own GEMM) and d > 1 (d = 1: strided's GEMMs)."""
    return p[0] > 1 and p[3] > 1


def block_dense_applies(info) -> bool:
    """Every dense block product a GEMM of 32-bit sizes (where it pays is the predictor's)."""
    return all(strided_fits(dense_slabs(p), info["layout"], info["B"], *strided_lds(p, info))
               for p in info["patterns"])


def _pays(name, info) -> bool:
    """Whether a cuBLAS algorithm can beat the others at all: strided where some factor saves
    bmm's permutes, block_dense where some factor's dense blocks are fewer flops than dense's.
    Elsewhere it runs when forced but is never the planner's pick."""
    if name == "strided":
        return any(strided_pays(p, info["layout"]) for p in info["patterns"])
    if name == "block_dense":
        return any(block_dense_pays(p) for p in info["patterns"])
    return True


def strided_lds(p, info) -> tuple:
    """x's and y's row strides for one factor of a contiguous problem."""
    a, b, c, d = p
    return (info["B"],) * 2 if info["layout"] == "batch_last" else (a * c * d, a * b * d)



# ---------------------------------------------------------------------------------------------
# coefficients (data) and the predictors

DEFAULT_COEF = load_coefficients(__file__)


def _coef_keys(name, kind, dtype, layout) -> tuple:
    """Coefficient keys of one candidate, the general first: family, family/dtype,
    family/dtype/layout."""
    base = f"structured_matmul/{name}/{kind}"
    return (base, f"{base}/{dtype}", f"{base}/{dtype}/{layout}")


def coefficients(name, kind, dtype, layout, prof) -> dict:
    """The coefficients in force: DEFAULT_COEF's keys from general to specific, then the
    profile's fitted ones (prof.coef, kronlinalg.planner store_coefficients) in the same order,
    so that anything a device's profile stores overrides the built-in numbers."""
    keys = _coef_keys(name, kind, dtype, layout)
    if name == "block_dense":  # (strided's GEMMs: its coefficients first)
        keys = _coef_keys("strided", kind, dtype, layout) + keys
    coef = {}
    for source in (DEFAULT_COEF, prof.coef):
        for k in keys:
            coef.update(source.get(k, {}))
    return coef


def predictor(name, kind):
    family = f"structured_matmul/{name}/{kind}"

    def predict(problem, prof):
        t = FAMILIES[name](problem.info, _ITEMSIZE.get(problem.dtype, 4), prof, problem.dtype)
        coef = coefficients(name, kind, problem.dtype, problem.info["layout"], prof)
        weighted = {k: coef.get(k, 1.0) * v for k, v in t.items()}
        details = {"terms": {k: v for k, v in weighted.items() if v}}
        if not _pays(name, problem.info):
            return math.inf, {"pays": False, **details}
        return sum(weighted.values()), details

    predict.__name__ = "predict_" + family.replace("/", "_")
    return predict


