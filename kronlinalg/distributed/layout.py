"""Where the pieces of a distributed operand live: the layouts of kronlinalg.distributed.

Kron-Matmul, grid (G_M, G_K): rank = g_M · G_K + g_K (row-major over the grid) holds rows
``rows_split(M, G_M, g_M)`` (near-equal blocks, the first M % G_M one row longer) and the
column block g_K of width K / G_K (contiguous) of X; the result Y (M × ∏Q) comes back in the
same layout (column block width ∏Q / G_K).

Strassen–Winograd and the classical split, on `size` ranks: every operand (A: m × k,
B: k × n, C: m × n, even m, k, n) is cut into its four quadrants and each quadrant's columns
into `size` near-equal strips; rank r holds strip r of every quadrant, all rows, as one array
[[X0_r, X1_r], [X2_r, X3_r]] of shape (rows, 2 · strip width).  With L levels the columns are
cut into 2^L blocks instead of 2 (rows need no cut: every rank holds all of them) and rank r
holds its strip of each block, side by side.
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


def quadrant_columns(cols: int, size: int, rank: int, levels: int = 1):
    """The 2^levels column slices of an operand with `cols` columns (divisible by 2^levels)
    that rank holds: its strip of each column block, left to right."""
    split = 1 << levels
    if levels < 1 or cols % split:
        raise ValueError(f"the operand has {cols} columns: a multiple of {split} is needed "
                         f"for {levels} level(s)")
    w = cols // split
    c0, c1 = cols_split(w, size, rank)
    return tuple(slice(j * w + c0, j * w + c1) for j in range(split))


def quadrant_shard(x, size: int, rank: int, levels: int = 1):
    """rank's strips of the global matrix x (rows × cols): its strip of each of the 2^levels
    column blocks, side by side (levels=1: [[X0_r, X1_r], [X2_r, X3_r]])."""
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    return xp.concat([x[:, s] for s in quadrant_columns(x.shape[1], size, rank, levels)],
                     axis=1)


def quadrant_assemble(strips, xp=None, levels: int = 1):
    """The global matrix from every rank's strips (a list in rank order)."""
    import array_api_compat

    xp = xp or array_api_compat.array_namespace(strips[0])
    split = 1 << levels
    blocks = []
    for j in range(split):
        for s in strips:
            w = s.shape[1] // split
            blocks.append(s[:, j * w:(j + 1) * w])
    return xp.concat(blocks, axis=1)
