"""kronlinalg.distributed's plans and costs: pure arithmetic on shapes (no arrays, no comm).

Kron-Matmul over a G_M × G_K grid (FastKron §5, generalised to distinct factor shapes; the
derivation is in docs/distributed.md).  The global intermediate before a round is laid out as
the axes (Q_{f+1} … Q_N, P_1 … P_f) (f factors left; the rotation of the sliced multiply);
rank (g_M, g_K) holds the contiguous column block g_K of width K_r / G_K.  A round multiplies
the trailing n factors locally (their P-axes must lie whole inside a block: T = ∏P | K_r/G_K)
and sends, for each destination block, C/G_K of the C = ∏Q new columns (G_K | C): every rank
sends rows · (K_out/G_K) · (G_K − 1)/G_K elements per round.  `kron_rounds` picks the rounds
that move the fewest elements (a tiny dynamic programme over f).

Strassen–Winograd / classical over ranks: a bilinear algorithm's products (7 or 8) laid end
to end on a line of product columns and cut into equal segments, one per rank
(`product_segments`); the pre- and post-additions run on every rank's column strips.

Costs: local compute from the single-device models (planner.plan of kron_matmul / matmul),
communication as latency + bytes / bandwidth with the link measured by
``kronlinalg.distributed.calibrate`` (defaults: `DEFAULT_LINKS`).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

from ...common.dtypes import ITEMSIZE as _ITEMSIZE

__all__ = ["Round", "kron_rounds", "kron_bytes_per_rank", "rows_split", "cols_split",
           "grids", "predict_kron", "choose_grid", "product_segments", "chunk_segments",
           "predict_matmul",
           "DEFAULT_LINKS", "normalise_kron", "normalise_matmul"]

# (latency s, bytes/s a rank sends while all send) by device kind: NVLink 4 (H100 SXM, NCCL
# all-to-all) and shared-memory MPI on a CPU host.  calibrate() replaces them.
DEFAULT_LINKS = {"cuda": (2.0e-5, 1.0e11), "cpu": (5.0e-6, 2.0e9)}


class Round(NamedTuple):
    first: int  # the factors of this round are first .. stop-1 (0-based)
    stop: int
    k_in: int  # global width of the intermediate before the round
    t: int  # ∏ P of the round's factors (the local contraction width)
    c: int  # ∏ Q of the round's factors
    k_out: int  # global width after the round


def rows_split(m: int, parts: int, index: int) -> tuple:
    """(start, stop) of the index-th of `parts` near-equal row blocks (the first m % parts
    blocks hold one row more)."""
    base, extra = divmod(m, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


cols_split = rows_split


@functools.lru_cache(maxsize=1024)
def kron_rounds(shapes: tuple, g_k: int, per_factor: bool = False):
    """The rounds, in execution order, for factor shapes ((P_1, Q_1), …) on G_K column blocks, or None when no
    schedule exists (G_K must divide every intermediate width it meets and each round's ∏Q).
    per_factor: one factor per round (the baseline that exchanges after every factor)."""
    n = len(shapes)
    P = [int(s[0]) for s in shapes]
    Q = [int(s[1]) for s in shapes]

    def width(f):  # global width with f factors left
        return math.prod(Q[f:]) * math.prod(P[:f])

    @functools.lru_cache(maxsize=None)
    def best(f):  # (elements moved per row, rounds, plan) for the first f factors
        if f == 0:
            return (0, 0, ())
        k_in = width(f)
        if k_in % g_k:
            return None
        block = k_in // g_k
        found = None
        for cnt in range(1, f + 1):
            if per_factor and cnt > 1:
                break
            t = math.prod(P[f - cnt:f])
            if t == 0 or block % t:
                break
            c = math.prod(Q[f - cnt:f])
            if g_k > 1 and c % g_k:
                continue
            sub = best(f - cnt)
            if sub is None:
                continue
            k_out = k_in // t * c
            moved = k_out if g_k > 1 else 0
            # executed first: this round (the trailing factors), then the earlier ones
            cand = (sub[0] + moved, sub[1] + 1, (Round(f - cnt, f, k_in, t, c, k_out),) + sub[2])
            if found is None or cand[:2] <= found[:2]:  # ties: the longest first round
                found = cand
        return found

    if n == 0 or any(p <= 0 or q <= 0 for p, q in zip(P, Q)):
        return None
    res = best(n)
    return None if res is None else res[2]


def kron_bytes_per_rank(rounds, rows: int, g_k: int, itemsize: int) -> int:
    """Bytes a rank holding `rows` rows sends over a whole call: per round, all of its new
    block (rows × K_out/G_K) but the part it keeps."""
    if g_k == 1:
        return 0
    return sum(rows * (r.k_out // g_k) // g_k * (g_k - 1) for r in rounds) * itemsize


def grids(size: int):
    """Every (G_M, G_K) with G_M · G_K = size."""
    return [(size // d, d) for d in range(1, size + 1) if size % d == 0]


def _link(kind, latency_s, bandwidth):
    lat, bw = DEFAULT_LINKS.get(kind, DEFAULT_LINKS["cpu"])
    return (lat if latency_s is None else latency_s), (bw if bandwidth is None else bandwidth)


def predict_kron(m, shapes, grid, dtype="float32", device="cpu", kind="cpu", latency_s=None,
                 bandwidth=None, per_factor=False, profile=None):
    """(seconds, details) of one rank's work for X (m × ∏P) on `grid`, or (inf, reason)."""
    from ..ranking import plan

    g_m, g_k = grid
    shapes = tuple((int(p), int(q)) for p, q in shapes)
    rounds = kron_rounds(shapes, g_k, per_factor)
    if rounds is None or g_m > max(m, 1):
        return math.inf, {"reason": f"no schedule for G_K = {g_k}" if rounds is None
                          else f"G_M = {g_m} exceeds the {m} rows"}
    rows = rows_split(m, g_m, 0)[1]
    s_e = _ITEMSIZE.get(dtype, 4)
    lat, bw = _link(kind, latency_s, bandwidth)
    mem_bw = profile.bandwidth if profile is not None else 1.0e11
    compute = comm = pack = 0.0
    for r in rounds:
        width = r.k_in // g_k // r.t
        try:
            best = plan("kron_matmul", (rows * width, r.t), *shapes[r.first:r.stop],
                        dtype=dtype, device=device)[0]
            compute += best.seconds
        except (ValueError, KeyError, TypeError):
            compute += 2.0 * rows * r.k_in / g_k * sum(q for _, q in shapes[r.first:r.stop]) / 1e11
        if g_k > 1:
            out_bytes = rows * r.k_out // g_k * s_e
            pack += 4.0 * out_bytes / mem_bw  # the pack and the unpack: read + write each
            comm += (g_k - 1) * lat + out_bytes * (g_k - 1) / g_k / bw
    sent = kron_bytes_per_rank(rounds, rows, g_k, s_e)
    total = compute + comm + pack
    return total, {"grid": grid, "rounds": len(rounds), "bytes_sent": sent,
                   "terms": {"compute": compute, "comm": comm, "pack": pack}}


def choose_grid(m, shapes, size, dtype="float32", device="cpu", kind="cpu", latency_s=None,
                bandwidth=None, profile=None):
    """The (G_M, G_K) of least predicted time over every factorisation of `size`."""
    best = None
    for grid in grids(size):
        t, _ = predict_kron(m, shapes, grid, dtype, device, kind, latency_s, bandwidth,
                            profile=profile)
        if best is None or t < best[0]:
            best = (t, grid)
    if best is None or not math.isfinite(best[0]):
        raise ValueError(f"factors: no grid of {size} ranks fits {m} rows and factor shapes "
                         f"{list(shapes)}")
    return best[1]


def _line_pieces(lo: int, hi: int, cols: int) -> tuple:
    """The (product, col0, col1) pieces of the positions [lo, hi) on the line of products'
    columns laid end to end (`cols` a product)."""
    pieces = []
    pos = lo
    while pos < hi:
        i, c0 = divmod(pos, cols)
        c1 = min(cols, c0 + hi - pos)
        pieces.append((i, c0, c1))
        pos += c1 - c0
    return tuple(pieces)


def product_segments(n_products: int, cols: int, size: int):
    """Per rank, its (product, col0, col1) pieces: the products' `cols` columns laid end to end
    (n_products · cols) and cut into `size` near-equal segments."""
    total = n_products * cols
    return tuple(_line_pieces(*rows_split(total, size, r), cols) for r in range(size))


def chunk_segments(n_products: int, cols: int, size: int, chunks: int):
    """Per rank, its segment (``product_segments``) cut into `chunks` near-equal runs of
    columns, each a tuple of (product, col0, col1) pieces (empty where the segment is shorter
    than `chunks`): out[rank][chunk].  One chunk is the segment itself."""
    total = n_products * cols
    out = []
    for r in range(size):
        lo, hi = rows_split(total, size, r)
        out.append(tuple(_line_pieces(lo + c0, lo + c1, cols)
                         for c0, c1 in (rows_split(hi - lo, chunks, u) for u in range(chunks))))
    return tuple(out)


def predict_matmul(m, k, n, size, n_products, dtype="float64", device="cpu", kind="cpu",
                   latency_s=None, bandwidth=None, profile=None, additions=15,
                   leaf_op="matmul"):
    """(seconds, details) of the slowest rank for a bilinear algorithm of `n_products` products
    of half-size blocks over `size` ranks (7: Strassen–Winograd, 8: the classical split), each
    piece priced by the single-device model of `leaf_op` ("matmul" for the library's GEMM,
    "strassen_matmul" for Strassen leaves)."""
    from ..ranking import plan

    m2, k2, n2 = m // 2, k // 2, n // 2
    s_e = _ITEMSIZE.get(dtype, 8)
    lat, bw = _link(kind, latency_s, bandwidth)
    mem_bw = profile.bandwidth if profile is not None else 1.0e11
    segs = product_segments(n_products, n2, size)
    worst = (0.0, {})
    for r, pieces in enumerate(segs):
        compute = recv = 0.0
        msgs = 0
        for i, c0, c1 in pieces:
            try:
                best = plan(leaf_op, (m2, k2), (k2, c1 - c0), dtype=dtype, device=device)[0]
                if leaf_op != "matmul" and best.name == "classical":
                    # (strassen_matmul's classical is the library GEMM: priced by its model)
                    best = plan("matmul", (m2, k2), (k2, c1 - c0), dtype=dtype,
                                device=device)[0]
                compute += best.seconds
            except (ValueError, KeyError, TypeError):
                compute += 2.0 * m2 * k2 * (c1 - c0) / 1e11
            recv += (m2 * k2 + k2 * (c1 - c0)) * (size - 1) / size
            msgs += 2 * (size - 1)
        sent_back = sum((c1 - c0) * m2 for _, c0, c1 in pieces) * (size - 1) / size
        strip = lambda rows, cols: rows * cols / size  # noqa: E731
        adds = additions * 3 * strip(max(m2, k2), max(k2, n2)) * s_e / mem_bw
        comm = msgs * lat + (recv + sent_back) * s_e / bw
        t = compute + comm + adds
        if t > worst[0]:
            worst = (t, {"rank": r, "terms": {"compute": compute, "comm": comm, "additions": adds}})
    return worst


def normalise_kron(shapes, options) -> dict:
    if len(shapes) < 2 or len(shapes[0]) != 2:
        raise ValueError("shapes: distributed_kron_matmul takes x's global (M, K), then each "
                         "factor's (P, Q)")
    m, k = (int(d) for d in shapes[0])
    fs = tuple((int(s[0]), int(s[1])) for s in shapes[1:])
    if math.prod(p for p, _ in fs) != k:
        raise ValueError(f"shapes: x has {k} columns, the factors' ∏P is "
                         f"{math.prod(p for p, _ in fs)}")
    return {"m": m, "k": k, "factors": fs}


def normalise_matmul(shapes, options) -> dict:
    if len(shapes) != 2 or any(len(s) != 2 for s in shapes) or shapes[0][1] != shapes[1][0]:
        raise ValueError("shapes: distributed_matmul takes a's (m, k) and b's (k, n)")
    (m, k), (_, n) = shapes
    return {"m": int(m), "k": int(k), "n": int(n)}
