"""Distributed Kron-Matmul (FastKron §5, for distinct factor shapes): Y = X (F_1 ⊗ … ⊗ F_N)
with X over a G_M × G_K grid of ranks and the factors replicated.

Each round multiplies a rank's column block by the next factors (the trailing ones) locally,
through the public ``kronlinalg.kron_matmul`` on the block reshaped to (rows · R, T), then one
exchange among the G_K ranks of a grid row relays the pieces into the next round's layout
(the plan: ``planner/costs/distributed.kron_rounds``; the derivation: docs/distributed.md).
G_K = 1 moves no data at all.  ``algorithm="per_factor"`` is the baseline that exchanges
after every factor (CTF's and DISTAL's communication pattern).
"""

from __future__ import annotations

import math

import array_api_compat

from ..planner.costs import distributed as costs
from . import checks
from .adapters import communicator
from .comm import agree, contiguous, copy_into, empty_like_shape, fingerprint

__all__ = ["kron_matmul", "kron_grid", "kron_rounds", "kron_bytes"]

ALGORITHMS = ("fastkron", "per_factor")


def _public_kron_matmul():
    import kronlinalg  # the public operation, at call time: no import of another operation

    return kronlinalg.kron_matmul


def _dtype_name(a) -> str:
    name = str(a.dtype)
    return name.replace("torch.", "")


def kron_rounds(factor_shapes, grid, algorithm="fastkron"):
    """The rounds a call runs (planner/costs/distributed.Round records), or a ValueError when
    G_K admits no schedule for these factor shapes."""
    shapes = tuple((int(p), int(q)) for p, q in factor_shapes)
    rounds = costs.kron_rounds(shapes, int(grid[1]), algorithm == "per_factor")
    if rounds is None:
        raise ValueError(f"grid: G_K = {grid[1]} admits no schedule for factor shapes "
                         f"{list(shapes)} (G_K must divide ∏P, ∏Q and each round's ∏Q; "
                         "G_K = 1 always works)")
    return rounds


def kron_bytes(m, factor_shapes, grid, rank, itemsize, algorithm="fastkron") -> int:
    """Bytes `rank` sends in one call (the formula the byte counter is checked against)."""
    rows = costs.rows_split(m, grid[0], rank // grid[1])
    return costs.kron_bytes_per_rank(kron_rounds(factor_shapes, grid, algorithm),
                                     rows[1] - rows[0], int(grid[1]), itemsize)


def kron_grid(m, factor_shapes, comm_or_size, *, dtype="float32", device="cpu",
              latency_s=None, bandwidth=None):
    """The (G_M, G_K) grid the cost model picks for X (m × ∏P) on that many ranks (a size or
    a communicator).  device: 'cpu', 'cuda' or a GPU profile name such as 'h100-sxm'; the link
    is latency_s / bandwidth, else the last ``calibrate()`` of that device kind, else a table
    value (NVLink 4 for 'cuda', shared memory for 'cpu')."""
    size = comm_or_size if isinstance(comm_or_size, int) else communicator(comm_or_size).size
    kind = "cpu" if str(device) == "cpu" else "cuda"  # 'cuda', 'cuda:N' or a GPU profile name
    return costs.choose_grid(int(m), tuple((int(p), int(q)) for p, q in factor_shapes), size,
                             dtype=dtype, device=device, kind=kind, latency_s=latency_s,
                             bandwidth=bandwidth)


def _check(table, size, factor_shapes):
    g_m = checks.same(table, "g_m", "grid", "the grids")
    g_k = checks.same(table, "g_k", "grid", "the grids")
    if g_m * g_k != size or g_m < 1 or g_k < 1:
        raise ValueError(f"grid: ({g_m}, {g_k}) does not cover the {size} ranks of comm")
    checks.same(table, "algorithm", "algorithm", "the algorithms",
                lambda c: ALGORITHMS[c] if c < len(ALGORITHMS) else "?")
    checks.same(table, "dtype", "x", "the dtypes", checks.dtype_of_code)
    checks.same(table, "nfactors", "factors", "the numbers of factors")
    checks.same(table, "factors", "factors", "the factors (shapes or values)",
                lambda h: f"fingerprint {h:x}")
    k = math.prod(p for p, _ in factor_shapes)
    want = k // g_k if k % g_k == 0 else None
    cols = [row["cols"] for row in table]
    if want is None or any(c != want for c in cols):
        raise ValueError(f"x: every rank must hold a column block of width ∏P / G_K = {k} / "
                         f"{g_k}; held widths: {checks.group_text(table, 'cols')}")
    m = sum(table[i * g_k]["rows"] for i in range(g_m))
    for r, row in enumerate(table):
        r0, r1 = costs.rows_split(m, g_m, r // g_k)
        if row["rows"] != r1 - r0:
            raise ValueError(
                f"x: the row blocks do not match the layout of {m} rows over G_M = {g_m} "
                f"(rows_split: the first M % G_M blocks one row longer); held rows: "
                f"{checks.group_text(table, 'rows')}")
    return g_m, g_k, m


def kron_matmul(x, factors, /, *, comm, grid, algorithm="fastkron", pipeline=1,
                timeout=None):
    """This rank's block of ``X @ (F_1 ⊗ … ⊗ F_N)`` for X distributed over `grid`.

    Parameters
    ----------
    x : 2-D array (NumPy, CuPy or torch)
        This rank's block of X (M × ∏P): rows ``rows_split(M, G_M, g_M)``, columns
        ``[g_K · K/G_K, (g_K + 1) · K/G_K)`` with rank = g_M · G_K + g_K
        (``distributed.kron_shard`` cuts it from a global array).
    factors : sequence of 2-D arrays (P_i, Q_i), the same on every rank (checked).
    comm : an mpi4py communicator, a torch.distributed process group, a CuPy
        NcclCommunicator or a ``distributed.Communicator``.
    grid : (G_M, G_K) with G_M · G_K = comm's size; ``distributed.kron_grid`` picks one.
    algorithm : "fastkron" (local multiplies, then one exchange per round) or "per_factor"
        (an exchange after every factor: the baseline).
    pipeline : row parts per round (default 1): with k > 1 a round multiplies and sends its
        rows in k parts, so part i's exchange runs while part i + 1 is multiplied (NCCL and
        MPI); the same on every rank (checked).
    timeout : seconds to wait for every rank at the metadata check (default 60).

    Returns this rank's block of Y (M × ∏Q) in the same layout.  Bad input (shards that do
    not fit the grid, factors that differ, a missing rank) is the same ValueError on every
    rank, raised before any data moves.
    """
    c = communicator(comm)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {ALGORITHMS}, got {algorithm!r}")
    factors = list(factors)
    if not factors:
        raise ValueError("factors: at least one factor is needed")
    xp = array_api_compat.array_namespace(x, *factors)
    if x.ndim != 2 or any(f.ndim != 2 for f in factors):
        raise ValueError("x: distributed.kron_matmul takes a 2-D block and 2-D factors")
    try:
        g_m, g_k = (int(g) for g in grid)
    except (TypeError, ValueError):
        raise TypeError(f"grid: expected a pair (G_M, G_K), got {grid!r}") from None
    shapes = tuple((int(f.shape[0]), int(f.shape[1])) for f in factors)
    fields = {"rows": x.shape[0], "cols": x.shape[1], "g_m": g_m, "g_k": g_k,
              "algorithm": ALGORITHMS.index(algorithm),
              "dtype": checks.dtype_code(_dtype_name(x)), "nfactors": len(factors),
              "factors": fingerprint(factors), "pipeline": checks.count(pipeline, "pipeline")}
    table = agree(c, "distributed.kron_matmul", fields, timeout)
    g_m, g_k, m = _check(table, c.size, shapes)
    rounds = kron_rounds(shapes, (g_m, g_k), algorithm)
    pipeline = checks.same(table, "pipeline", "pipeline", "the pipeline counts")
    if pipeline < 1:
        raise ValueError(f"pipeline: expected a positive count of row parts, got {pipeline}")
    return _run(c, xp, x, factors, rounds, g_k, pipeline)


def _run(c, xp, x, factors, rounds, g_k, pipeline=1):
    local_mm = _public_kron_matmul()
    rows = x.shape[0]
    row0 = (c.rank // g_k) * g_k  # the first rank of this grid row
    y = x
    for rnd in rounds:
        block = rnd.k_in // g_k
        width = block // rnd.t
        fs = factors[rnd.first:rnd.stop]
        if g_k == 1:  # the rotation alone (none when the round takes every factor)
            local = local_mm(xp.reshape(y, (rows * width, rnd.t)), fs)
            if width > 1:
                local = xp.permute_dims(xp.reshape(local, (rows, width, rnd.c)), (0, 2, 1))
            y = xp.reshape(local, (rows, width * rnd.c))
            continue
        w = rnd.c // g_k
        parts = [costs.rows_split(rows, pipeline, i) for i in range(pipeline)]
        parts = [(r0, r1) for r0, r1 in parts if r1 > r0] or [(0, rows)]
        out = None
        pending = []
        for r0, r1 in parts:
            n = r1 - r0
            local = local_mm(xp.reshape(y[r0:r1, ...], (n * width, rnd.t)), fs)
            # the piece for block d: the new columns [d·w, (d+1)·w) of every prefix position
            send = contiguous(xp.permute_dims(xp.reshape(local, (n, width, g_k, w)), (2, 0, 1, 3)))
            del local
            recv = empty_like_shape(send, (g_k, n, width, w))
            started = c.exchange_start({row0 + d: send[d, ...] for d in range(g_k)},
                                       {row0 + s: recv[s, ...] for s in range(g_k)}, send)
            pending.append((r0, r1, started, recv))
            del send
            if len(pending) > 1:  # this part's compute is queued: finish the one before
                out = _finish(xp, pending.pop(0), out, rows, w * g_k * width)
        for item in pending:
            out = _finish(xp, item, out, rows, w * g_k * width)
        y = out
    return y


def _finish(xp, item, out, rows, new_width):
    """Complete one part's exchange and unpack it: block layout after the round is (new
    column in w, source block, prefix position)."""
    r0, r1, started, recv = item
    started.wait()
    part = xp.reshape(xp.permute_dims(recv, (1, 3, 0, 2)), (r1 - r0, new_width))
    if r0 == 0 and r1 == rows:
        return part
    if out is None:
        out = empty_like_shape(recv, (rows, new_width))
    copy_into(out[r0:r1, ...], part)
    return out
