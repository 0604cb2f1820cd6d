"""Where the pieces of a distributed operand live: the layouts of kronlinalg.distributed.

Kron-Matmul, grid (G_M, G_K): rank = g_M · G_K + g_K (row-major over the grid) holds rows
``rows_split(M, G_M, g_M)`` (near-equal blocks, the first M % G_M one row longer) and the
column block g_K of width K / G_K (contiguous) of X; the result Y (M × ∏Q) comes back in the
same layout (column block width ∏Q / G_K).

Strassen–Winograd and the classical split, on `size` ranks: every operand (A: m × k,
B: k × n, C: m × n, even m, k, n) is cut into its four quadrants and each quadrant's columns
into `size` near-equal strips; rank r holds strip r of every quadrant, all rows, as one array
[[X0_r, X1_r], [X2_r, X3_r]] of shape (rows, 2 · strip width).
"""

from __future__ import annotations

from ..planner.costs.distributed import cols_split, rows_split

__all__ = ["kron_block", "kron_shard", "kron_assemble", "quadrant_columns", "quadrant_shard",
           "quadrant_assemble", "rows_split", "cols_split"]


def kron_block(m: int, width: int, grid, rank: int):
    """(row slice, column slice) of the global (m × width) array that `rank` holds."""
    g_m, g_k = (int(g) for g in grid)
    if width % g_k:
        raise ValueError(f"grid: G_K = {g_k} does not divide the width {width}")
    i, j = divmod(rank, g_k)
    r0, r1 = rows_split(m, g_m, i)
    w = width // g_k
    return slice(r0, r1), slice(j * w, (j + 1) * w)


def kron_shard(x, grid, rank: int):
    """rank's block of the global x (M × K): what distributed.kron_matmul takes."""
    rows, cols = kron_block(x.shape[0], x.shape[1], grid, rank)
    return x[rows, cols]


def kron_assemble(blocks, grid, xp=None):
    """The global array from every rank's block (a list in rank order)."""
    import array_api_compat

    xp = xp or array_api_compat.array_namespace(blocks[0])
    g_m, g_k = (int(g) for g in grid)
    rows = [xp.concat(list(blocks[i * g_k:(i + 1) * g_k]), axis=1) for i in range(g_m)]
    return xp.concat(rows, axis=0)


def quadrant_columns(cols: int, size: int, rank: int):
    """The two column slices of an operand with `cols` columns (even) that rank holds."""
    if cols % 2:
        raise ValueError(f"the operand has {cols} columns: an even count is needed")
    h = cols // 2
    c0, c1 = cols_split(h, size, rank)
    return slice(c0, c1), slice(h + c0, h + c1)


def quadrant_shard(x, size: int, rank: int):
    """rank's strips of the global matrix x (rows × cols, both even)."""
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    left, right = quadrant_columns(x.shape[1], size, rank)
    return xp.concat([x[:, left], x[:, right]], axis=1)


def quadrant_assemble(strips, xp=None):
    """The global matrix from every rank's strips (a list in rank order)."""
    import array_api_compat

    xp = xp or array_api_compat.array_namespace(strips[0])
    lefts = [s[:, :s.shape[1] // 2] for s in strips]
    rights = [s[:, s.shape[1] // 2:] for s in strips]
    return xp.concat(lefts + rights, axis=1)
