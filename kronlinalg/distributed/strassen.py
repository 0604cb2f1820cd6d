"""Strassen–Winograd over ranks (MSMES ch. 4, with the issue's corrections) and the classical
2 × 2 block split, as one engine for bilinear algorithms on the quadrant-strip layout
(``layout.py``: rank r holds column strip r of every quadrant of A, B and C).

1. Pre-additions, data-parallel: every rank forms its strips of the T_i (from A's quadrants)
   and S_i (from B's), no communication.
2. Products, task-parallel: the products' columns are laid end to end and cut into one equal
   segment per rank (``costs.product_segments``: 7 products over 2, 4 or 7 ranks, or any
   count, split where a segment ends).  The owner of a piece (i, columns c0:c1) gathers the
   whole T_i and S_i[:, c0:c1] (one exchange), multiplies (the leaf: the library GEMM, the
   planner's ``kronlinalg.matmul``, or ``kronlinalg.strassen_matmul``), and sends each rank
   its strip of the piece back (a second exchange).
3. Post-additions, data-parallel, into C's strips.
"""

from __future__ import annotations

import array_api_compat

from ..planner.costs import distributed as costs
from . import checks
from .adapters import communicator
from .comm import agree, contiguous

__all__ = ["strassen_matmul", "WINOGRAD", "CLASSICAL", "ALGORITHMS", "LEAVES"]

# A program: (pre-additions of A, pre-additions of B, products (T name, S name), post-additions).
# Each addition: (target, ((coefficient, source), ...)); sources A0..A3 / B0..B3 / earlier ones.
WINOGRAD = (
    (("T2", ((1, "A2"), (1, "A3"))), ("T3", ((1, "T2"), (-1, "A0"))),
     ("T4", ((1, "A0"), (-1, "A2"))), ("T5", ((1, "A1"), (-1, "T3")))),
    (("S2", ((1, "B1"), (-1, "B0"))), ("S3", ((1, "B3"), (-1, "S2"))),
     ("S4", ((1, "B3"), (-1, "B1"))), ("S6", ((1, "S3"), (-1, "B2")))),
    (("A0", "B0"), ("A1", "B2"), ("T2", "S2"), ("T3", "S3"), ("T4", "S4"), ("T5", "B3"),
     ("A3", "S6")),
    (("U1", ((1, "Q0"), (1, "Q3"))), ("U2", ((1, "U1"), (1, "Q4"))),
     ("U3", ((1, "U1"), (1, "Q2"))), ("C0", ((1, "Q0"), (1, "Q1"))),
     ("C1", ((1, "U3"), (1, "Q5"))), ("C2", ((1, "U2"), (-1, "Q6"))),
     ("C3", ((1, "U2"), (1, "Q2")))),
)
CLASSICAL = (
    (), (),
    (("A0", "B0"), ("A1", "B2"), ("A0", "B1"), ("A1", "B3"), ("A2", "B0"), ("A3", "B2"),
     ("A2", "B1"), ("A3", "B3")),
    (("C0", ((1, "Q0"), (1, "Q1"))), ("C1", ((1, "Q2"), (1, "Q3"))),
     ("C2", ((1, "Q4"), (1, "Q5"))), ("C3", ((1, "Q6"), (1, "Q7")))),
)
ALGORITHMS = {"strassen_winograd": WINOGRAD, "classical": CLASSICAL}
LEAVES = ("library", "auto", "strassen")


def _add(terms, env):
    (c0, s0), *rest = terms
    out = env[s0] if c0 == 1 else -env[s0]
    for coef, src in rest:
        out = out + env[src] if coef == 1 else out - env[src]
    return out


def _leaf(name, xp):
    if name == "library":
        return xp.matmul
    import kronlinalg  # public operations at call time: no import of another operation

    if name == "strassen":
        return kronlinalg.strassen_matmul
    return kronlinalg.matmul


def _dtype_name(a) -> str:
    return str(a.dtype).replace("torch.", "")


def _check(table, size):
    for field, what in (("m", "the row counts of a"), ("k", "the row counts of b")):
        checks.same(table, field, "a" if field == "m" else "b", what)
    checks.same(table, "dtype", "a", "the dtypes", checks.dtype_of_code)
    checks.same(table, "algorithm", "algorithm", "the algorithms")
    checks.same(table, "leaf", "leaf", "the leaves")
    m, k = table[0]["m"], table[0]["k"]
    if m % 2 or k % 2:
        raise ValueError(f"a: Strassen over ranks needs even m and k, got m = {m}, k = {k}")
    k2 = sum(row["acols"] for row in table) // 2
    n2 = sum(row["bcols"] for row in table) // 2
    if k2 * 2 != k:
        raise ValueError(f"a: the strips' widths add up to {2 * k2} columns, b has {k} rows; "
                         f"held widths: {checks.group_text(table, 'acols')}")
    for field, half, name in (("acols", k2, "a"), ("bcols", n2, "b")):
        for r, row in enumerate(table):
            c0, c1 = costs.cols_split(half, size, r)
            if row[field] != 2 * (c1 - c0):
                raise ValueError(
                    f"{name}: rank {r} holds {row[field]} columns; the quadrant-strip layout "
                    f"of {2 * half} columns over {size} ranks gives it {2 * (c1 - c0)} "
                    f"(held: {checks.group_text(table, field)})")
    return m // 2, k2, n2


def strassen_matmul(a, b, /, *, comm, algorithm="strassen_winograd", leaf="library",
                    timeout=None):
    """This rank's strips of ``A @ B`` by Strassen–Winograd (7 products) or the classical
    2 × 2 split (8), over every rank of comm.

    a, b : this rank's strips of A (m × k) and B (k × n) in the quadrant-strip layout
        (``distributed.quadrant_shard``); m, k, n even.
    algorithm : "strassen_winograd" or "classical".
    leaf : "library" (the array library's matmul), "auto" (kronlinalg.matmul, the
        planner's choice) or "strassen" (kronlinalg.strassen_matmul) for each product piece.

    Returns this rank's strips of C (m × n), same layout.  Bad input is the same ValueError on
    every rank before any data moves.
    """
    c = communicator(comm)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    if leaf not in LEAVES:
        raise ValueError(f"leaf: expected one of {LEAVES}, got {leaf!r}")
    xp = array_api_compat.array_namespace(a, b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("a: distributed.strassen_matmul takes 2-D strips")
    if a.shape[1] % 2 or b.shape[1] % 2:
        raise ValueError("a: a strip holds two halves (left and right quadrants): an even "
                         f"width is needed, got {a.shape[1]} and {b.shape[1]}")
    fields = {"m": a.shape[0], "k": b.shape[0], "acols": a.shape[1], "bcols": b.shape[1],
              "dtype": checks.dtype_code(_dtype_name(a)) * 16
              + checks.dtype_code(_dtype_name(b)),
              "algorithm": sorted(ALGORITHMS).index(algorithm), "leaf": LEAVES.index(leaf)}
    table = agree(c, "distributed.strassen_matmul", fields, timeout)
    m2, k2, n2 = _check(table, c.size)
    if _dtype_name(a) != _dtype_name(b):
        raise TypeError(f"b: its dtype {_dtype_name(b)} differs from a's {_dtype_name(a)}")
    return _run(c, xp, a, b, ALGORITHMS[algorithm], _leaf(leaf, xp), m2, k2, n2)


def _quadrants(x, rows2, prefix):
    w = x.shape[1] // 2
    return {f"{prefix}0": x[:rows2, :w], f"{prefix}1": x[:rows2, w:],
            f"{prefix}2": x[rows2:, :w], f"{prefix}3": x[rows2:, w:]}


def _run(c, xp, a, b, program, leaf, m2, k2, n2):
    pre_a, pre_b, products, post = program
    size, me = c.size, c.rank
    env = {**_quadrants(a, m2, "A"), **_quadrants(b, k2, "B")}
    for target, terms in pre_a + pre_b:
        env[target] = _add(terms, env)
    segs = costs.product_segments(len(products), n2, size)
    kstrip = [costs.cols_split(k2, size, r) for r in range(size)]
    nstrip = [costs.cols_split(n2, size, r) for r in range(size)]

    def overlap(lo, hi, r):
        s0, s1 = nstrip[r]
        return max(lo, s0), min(hi, s1)

    # exchange 1: the owner of each piece gets every rank's T_i strip and the S_i columns
    sends, shapes = {}, {}
    for o in range(size):
        for i, c0, c1 in segs[o]:
            t_name, s_name = products[i]
            lo, hi = overlap(c0, c1, me)
            parts = [env[t_name]] + ([env[s_name][:, lo - nstrip[me][0]:hi - nstrip[me][0]]]
                                     if lo < hi else [])
            sends.setdefault(o, []).extend(parts)
    for q in range(size):
        for i, c0, c1 in segs[me]:
            lo, hi = overlap(c0, c1, q)
            shapes.setdefault(q, []).append((m2, kstrip[q][1] - kstrip[q][0]))
            if lo < hi:
                shapes[q].append((k2, hi - lo))
    got = _exchange_lists(c, xp, sends, shapes, a)
    # the products of this rank's pieces
    mine = []
    for j, (i, c0, c1) in enumerate(segs[me]):
        t_parts, s_parts = [], []
        for q in range(size):
            items = got[q]
            t_parts.append(items[_index(segs[me], j, q, overlap)[0]])
            si = _index(segs[me], j, q, overlap)[1]
            if si is not None:
                s_parts.append(items[si])
        t_full = xp.concat(t_parts, axis=1) if len(t_parts) > 1 else t_parts[0]
        s_cols = xp.concat(s_parts, axis=1) if len(s_parts) > 1 else s_parts[0]
        mine.append(leaf(t_full, s_cols))
    del got
    # exchange 2: every rank gets its strip of each product piece
    sends, shapes = {}, {}
    for j, (i, c0, c1) in enumerate(segs[me]):
        for q in range(size):
            lo, hi = overlap(c0, c1, q)
            if lo < hi:
                sends.setdefault(q, []).append(mine[j][:, lo - c0:hi - c0])
    for o in range(size):
        for i, c0, c1 in segs[o]:
            lo, hi = overlap(c0, c1, me)
            if lo < hi:
                shapes.setdefault(o, []).append((m2, hi - lo))
    got = _exchange_lists(c, xp, sends, shapes, a)
    strips = {}
    for o in range(size):
        items = iter(got.get(o, []))
        for i, c0, c1 in segs[o]:
            lo, hi = overlap(c0, c1, me)
            if lo < hi:
                strips.setdefault(i, []).append(next(items))
    for i in range(len(products)):
        parts = strips.get(i) or [a[:m2, :0]]  # an empty strip (fewer columns than ranks)
        env[f"Q{i}"] = xp.concat(parts, axis=1) if len(parts) > 1 else parts[0]
    for target, terms in post:
        env[target] = _add(terms, env)
    top = xp.concat([env["C0"], env["C1"]], axis=1)
    bottom = xp.concat([env["C2"], env["C3"]], axis=1)
    return xp.concat([top, bottom], axis=0)


def _index(pieces, j, q, overlap):
    """Positions, in the list received from rank q, of piece j's T strip and S columns."""
    pos = 0
    for jj, (i, c0, c1) in enumerate(pieces):
        lo, hi = overlap(c0, c1, q)
        if jj == j:
            return pos, (pos + 1 if lo < hi else None)
        pos += 1 + (1 if lo < hi else 0)
    raise IndexError(j)


def _exchange_lists(c, xp, sends, shapes, like):
    """Send each peer a list of 2-D arrays (packed into one flat buffer), receive lists of
    the given shapes: {peer: [arrays]}."""
    flat_sends = {}
    for p, parts in sends.items():
        if p == c.rank:
            continue
        flats = [xp.reshape(contiguous(x), (-1,)) for x in parts]
        flat_sends[p] = contiguous(xp.concat(flats)) if len(flats) > 1 else flats[0]
    recv_shapes = {q: (sum(r * w for r, w in s),) for q, s in shapes.items() if q != c.rank}
    got = c.exchange(flat_sends, recv_shapes, like)
    out = {}
    if c.rank in sends:
        out[c.rank] = list(sends[c.rank])
    for q, buf in got.items():
        items, pos = [], 0
        for r, w in shapes[q]:
            items.append(xp.reshape(buf[pos:pos + r * w], (r, w)))
            pos += r * w
        out[q] = items
    return out
