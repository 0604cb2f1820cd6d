"""MSMES's performance model of in-place Strassen (for the Strassen issue to plug into).

One Strassen level on an N×N×N product makes 7 products of size n = N/2 and the block sums
around them.  The level takes at least the largest of three times (a lower bound: the three
resources work concurrently):

- T_flop = (7N³/4 + 7N²)/τ: the seven half-size products plus the additions (MSMES's count: its
  5 compute stages and 2 recovery stages add 7N² operations in total).
- T_gmem: bytes through global memory over its bandwidth.  Our assumptions (MSMES §3.5.2 in
  spirit; the constants are parameters): each of the 7 products is a tiled GEMM with b_m×b_n
  output tiles, so it reads n³·s_e·(1/b_m + 1/b_n) bytes of operands and its epilogue reads and
  writes two C blocks (4n²·s_e); each of `add_stages` sum stages reads two blocks and writes one
  (3n²·s_e).
- T_smem: bytes through shared memory over B_sm·n_SM·clock.  Each product stages its operand tiles
  through shared memory once (n³·s_e·(1/b_m + 1/b_n) written) and warps with w_m×w_n warp tiles
  read them n³·s_e·(1/w_m + 1/w_n) times.

Deeper recursion (levels > 1) replaces the 7 products by 7 subproblems one level down; only the
deepest level does GEMMs.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["MsmesTerms", "msmes_level", "msmes_time"]


class MsmesTerms(NamedTuple):
    T_flop: float
    T_gmem: float
    T_smem: float
    T: float  # max of the three


def msmes_level(N, *, tau, gmem_bw, smem_bw, s_e, tile=(128, 128), warp_tile=(64, 64),
                add_stages=10, multiplies=True):
    """Seconds-bound of one Strassen level on an N×N×N product.

    tau: flop/s of the leaf GEMM; gmem_bw: bytes/s; smem_bw: bytes/s over all SMs
    (B_sm · n_SM · clock).  multiplies=False leaves out the seven products (inner levels).
    """
    n = N / 2.0
    bm, bn = tile
    wm, wn = warp_tile
    adds = 7.0 * N * N
    flops = (7.0 * N ** 3 / 4.0 if multiplies else 0.0) + adds
    gmem = add_stages * 3.0 * n * n * s_e
    smem = 0.0
    if multiplies:
        staged = n ** 3 * s_e * (1.0 / bm + 1.0 / bn)
        gmem += 7.0 * (staged + 4.0 * n * n * s_e)
        smem = 7.0 * (staged + n ** 3 * s_e * (1.0 / wm + 1.0 / wn))
    t_flop, t_gmem, t_smem = flops / tau, gmem / gmem_bw, smem / smem_bw
    return MsmesTerms(t_flop, t_gmem, t_smem, max(t_flop, t_gmem, t_smem))


def msmes_time(N, levels, **params):
    """Predicted seconds for `levels` Strassen levels (levels = 0: one plain GEMM's bound)."""
    if levels < 0:
        raise ValueError(f"levels: expected a non-negative integer, got {levels!r}")
    if levels == 0:
        tau, s_e = params["tau"], params["s_e"]
        return max(2.0 * N ** 3 / tau, 3.0 * N * N * s_e / params["gmem_bw"])
    total, count, size = 0.0, 1, float(N)
    for depth in range(levels):
        last = depth == levels - 1
        total += count * msmes_level(size, multiplies=last, **params).T
        count, size = count * 7, size / 2.0
    return total
