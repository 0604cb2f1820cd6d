"""strassen_matmul's schedules as records of launches: the corrected MSMES schedule (passes and
leaf groups), Strassen reloaded's sum leaves, the one-level sums form, and Winograd's form at
one or two levels.  Arithmetic on shapes only (planner/costs/strassen.py prices these records;
the operation's executors run them); see that module's docstring for the schedule itself."""

from __future__ import annotations

import functools
from typing import NamedTuple

__all__ = ["AddInto", "Combine", "GROUPS", "Leaf", "MAX_LEVELS", "MAX_RELOADED_LEVELS",
           "MAX_WINOGRAD_LEVELS", "PRODUCTS", "Pass", "RELOADED", "RELOADED_GROUPS", "STAGE_NAMES",
           "SUMS_A", "SUMS_B", "SumLeaf", "Product", "Sums", "WINOGRAD",
           "WinogradSums", "label", "private_schedule", "reloaded_schedule", "schedule",
           "sums_schedule", "winograd_schedule", "winograd_workspace"]

MAX_LEVELS = 4
# product i: (A quadrant, B quadrant, ((C quadrant, sign), ...))
PRODUCTS = (
    (0, 0, ((0, 1), (3, 1))),    # M0 = (A0+A3)(B0+B3)
    (2, 0, ((2, 1), (3, -1))),   # M1 = (A2+A3) B0
    (0, 1, ((1, 1), (3, 1))),    # M2 = A0 (B1-B3)
    (3, 2, ((0, 1), (2, 1))),    # M3 = A3 (B2-B0)
    (1, 3, ((1, 1), (0, -1))),   # M4 = (A0+A1) B3
    (2, 1, ((3, 1),)),           # M5 = (A2-A0)(B0+B1)
    (1, 2, ((0, 1),)),           # M6 = (A1-A3)(B2+B3)
)
GROUPS = ((1, 4), (2, 3), (0,), (5, 6))


class Pass(NamedTuple):
    """An element-wise pass (stage 1: S1, 2: S3+S4, 3: S6+S7) over `blocks` operand pairs:
    ((A row, A col), (B row, B col)) of blocks 2mh x 2kh and 2kh x 2nh."""

    stage: int
    depth: int
    mh: int
    kh: int
    nh: int
    blocks: tuple


class Leaf(NamedTuple):
    """One batched launch of leaf products X (m x k) · Y (k x n): `products` holds
    ((X row, col), (Y row, col), ((C row, C col, sign), ...)) per product; `first`: this
    launch makes the first write of its targets (beta applies)."""

    group: tuple
    m: int
    k: int
    n: int
    products: tuple
    first: bool


def _quad(origin, q, rows, cols):
    r, c = origin
    return (r + (q >> 1) * rows, c + (q & 1) * cols)


@functools.lru_cache(maxsize=256)
def schedule(m: int, k: int, n: int, levels: int, first: bool = True) -> tuple:
    """The launches of `levels` Strassen levels on an m x k @ k x n core (each a multiple of
    2^levels), in order: a tuple of Pass and Leaf records."""
    step = 1 << levels
    if m % step or k % step or n % step:
        raise ValueError(f"levels: the core {m}x{k}x{n} is not a multiple of 2^{levels}")
    out = []

    def run(prods, depth, first_, mm, kk, nn, path):
        if depth == levels:
            out.append(Leaf(path, mm, kk, nn, tuple(prods), first_))
            return
        mh, kh, nh = mm // 2, kk // 2, nn // 2
        blocks = tuple((x, y) for x, y, _ in prods)
        out.append(Pass(1, depth, mh, kh, nh, blocks))
        for g, members in enumerate(GROUPS):
            if g == 2:
                out.append(Pass(2, depth, mh, kh, nh, blocks))
            sub = []
            for x, y, targets in prods:
                for i in members:
                    aq, bq, ctab = PRODUCTS[i]
                    sub.append((_quad(x, aq, mh, kh), _quad(y, bq, kh, nh),
                                tuple(_quad(t[:2], cq, mh, nh) + (t[2] * s,)
                                      for t in targets for cq, s in ctab)))
            run(sub, depth + 1, first_ and g == 0, mh, kh, nh, path + (members,))
        out.append(Pass(3, depth, mh, kh, nh, blocks))

    run([((0, 0), (0, 0), ((0, 0, 1),))], 0, first, m, k, n, ())
    return tuple(out)


# Strassen reloaded (CUDA float64): Strassen's original seven products with the operand sums
# formed while the leaf loads its tiles (a and b only read, no passes, no copies).  Product i:
# (A sources, B sources, C targets), each ((quadrant, sign), ...).  Groups with disjoint targets
# (the order fixes every C element's order of additions: deterministic).
RELOADED = (
    (((0, 1), (3, 1)), ((0, 1), (3, 1)), ((0, 1), (3, 1))),   # (A0+A3)(B0+B3) -> C0, C3
    (((2, 1), (3, 1)), ((0, 1),), ((2, 1), (3, -1))),         # (A2+A3) B0 -> C2, -C3
    (((0, 1),), ((1, 1), (3, -1)), ((1, 1), (3, 1))),         # A0 (B1-B3) -> C1, C3
    (((3, 1),), ((2, 1), (0, -1)), ((0, 1), (2, 1))),         # A3 (B2-B0) -> C0, C2
    (((0, 1), (1, 1)), ((3, 1),), ((0, -1), (1, 1))),         # (A0+A1) B3 -> -C0, C1
    (((2, 1), (0, -1)), ((0, 1), (1, 1)), ((3, 1),)),         # (A2-A0)(B0+B1) -> C3
    (((1, 1), (3, -1)), ((2, 1), (3, 1)), ((0, 1),)),         # (A1-A3)(B2+B3) -> C0
)
RELOADED_GROUPS = ((0,), (1, 4), (2, 3), (5, 6))
MAX_RELOADED_LEVELS = 1  # sources per operand 2^levels; the kernels take up to 2


class SumLeaf(NamedTuple):
    """One launch of Strassen-reloaded leaf products: `products` holds (X sources, Y sources,
    targets): ((row, col, sign), ...) each, targets ((row, col, sign, fresh), ...) where fresh
    marks a target's first write (beta applies)."""

    group: tuple
    m: int
    k: int
    n: int
    products: tuple


@functools.lru_cache(maxsize=64)
def reloaded_schedule(m: int, k: int, n: int, levels: int, first: bool = True) -> tuple:
    """The leaf launches of `levels` levels of Strassen reloaded on an m x k @ k x n core."""
    step = 1 << levels
    if m % step or k % step or n % step:
        raise ValueError(f"levels: the core {m}x{k}x{n} is not a multiple of 2^{levels}")
    written = set()
    out = []

    def sub(blocks, quads, rows, cols):
        return tuple((r + (q >> 1) * rows, c + (q & 1) * cols, s * sq)
                     for r, c, s in blocks for q, sq in quads)

    def run(prods, depth, mm, kk, nn, path):
        if depth == levels:
            leaves = []
            for xs, ys, ts in prods:
                tt = tuple(t + (first and t[:2] not in written,) for t in ts)
                leaves.append((xs, ys, tt))
            written.update(t[:2] for _, _, ts in prods for t in ts)
            out.append(SumLeaf(path, mm, kk, nn, tuple(leaves)))
            return
        mh, kh, nh = mm // 2, kk // 2, nn // 2
        for members in RELOADED_GROUPS:
            nxt = [(sub(xs, RELOADED[i][0], mh, kh), sub(ys, RELOADED[i][1], kh, nh),
                    sub(ts, RELOADED[i][2], mh, nh))
                   for xs, ys, ts in prods for i in members]
            run(nxt, depth + 1, mh, kh, nh, path + (members,))

    run([(((0, 0, 1),), ((0, 0, 1),), ((0, 0, 1),))], 0, m, k, n, ())
    return tuple(out)


def private_schedule(m: int, k: int, n: int, levels: int, first: bool = True) -> tuple:
    """The schedule on a private copy of a and b (the default mode): the recovery passes after
    the last leaf launch are dropped (they would restore a copy that is thrown away)."""
    sched = schedule(m, k, n, levels, first)
    last = max(i for i, op in enumerate(sched) if isinstance(op, Leaf))
    return sched[:last + 1]


# strassen_cublas at one level, default mode: one pass forms the five A sums and five B sums
# of Strassen's original products into a workspace (5/4·(m·k + k·n) elements) from the
# untouched a and b; the seven cuBLAS products read those and the plain quadrants.  The pass
# kernel writes the sums in this order: the products (indices into RELOADED) whose A (B)
# operand is sum 0..4.
SUMS_A = (0, 1, 4, 5, 6)
SUMS_B = (0, 2, 3, 5, 6)


class Sums(NamedTuple):
    """The operand-sums pass: A's (mh x kh) and B's (kh x nh) five sums each."""

    mh: int
    kh: int
    nh: int


class Product(NamedTuple):
    """One cuBLAS product of the sums form or of Winograd's form, m x k @ k x n: x, y =
    (space, row, column) with space "a"/"b" (the operands), "sa"/"sb" (the sums workspace),
    "sa2"/"sb2" (Winograd's second level); targets ((row, col, sign, fresh), ...) in `space`
    ("c", or a scratch block "t2"); name: Strassen's M1..M7 (sums form) or Winograd's P1..P7
    (two levels: "P6.P2", the outer product first)."""

    name: str
    m: int
    k: int
    n: int
    x: tuple
    y: tuple
    targets: tuple
    space: str = "c"


@functools.lru_cache(maxsize=64)
def sums_schedule(m: int, k: int, n: int, first: bool = True) -> tuple:
    """One level of Strassen on an m x k @ k x n core (even sizes) through a sums workspace."""
    if m % 2 or k % 2 or n % 2:
        raise ValueError(f"the core {m}x{k}x{n} is not even")
    mh, kh, nh = m // 2, k // 2, n // 2
    out, written = [Sums(mh, kh, nh)], set()
    for i, (xs, ys, ts) in enumerate(RELOADED):
        x = (("sa", SUMS_A.index(i) * mh, 0) if len(xs) > 1
             else ("a",) + _quad((0, 0), xs[0][0], mh, kh))
        y = (("sb", SUMS_B.index(i) * kh, 0) if len(ys) > 1
             else ("b",) + _quad((0, 0), ys[0][0], kh, nh))
        tt = tuple(_quad((0, 0), q, mh, nh) + (sg, first and _quad((0, 0), q, mh, nh) not in
                                               written) for q, sg in ts)
        written.update(t[:2] for t in tt)
        out.append(Product(f"M{i + 1}", mh, kh, nh, x, y, tt))
    return tuple(out)


# strassen_cublas at one level in Winograd's form (float64, beta = 0, where cuBLAS can write C
# blocks itself): one pass forms four A sums and four B sums (S1 = A2+A3, S2 = S1-A0,
# S3 = A0-A2, S4 = A1-S2; T1 = B1-B0, T2 = B3-T1, T3 = B3-B1, T4 = T2-B2) into a workspace of
# (m·k + k·n) elements; each of the seven products goes straight into one C quadrant with
# cuBLAS's alpha and beta (no product buffer, no target pass): P1 -> C0, P6 -> C1, P7 -> C2,
# P5 -> C3 (first writes); then one pass over C combines them (U2 = P1+P6; C1 = U2+P5,
# C2 = U2+P7, C3 = U2+P7+P5); then C0 += P2, C1 += P3, C2 -= P4.  C traffic: 17 quadrant
# accesses, against 30 for the sums form's buffer and target passes; the sums pass 16, not 18.
# Product: (name, x source, y source, C quadrant, sign, fresh); a source is ("a"/"b", quadrant)
# or ("sa"/"sb", sum index 0..3).
WINOGRAD = (
    ("P1", ("a", 0), ("b", 0), 0, 1, True),
    ("P6", ("sa", 1), ("sb", 1), 1, 1, True),
    ("P7", ("sa", 2), ("sb", 2), 2, 1, True),
    ("P5", ("sa", 0), ("sb", 0), 3, 1, True),
    None,  # the combine pass
    ("P2", ("a", 1), ("b", 2), 0, 1, False),
    ("P3", ("sa", 3), ("b", 3), 1, 1, False),
    ("P4", ("a", 3), ("sb", 3), 2, -1, False),
)


class WinogradSums(NamedTuple):
    """The Winograd operand-sums pass: four sums of A's 2 x 2 blocks (mh x kh each) and four of
    B's (kh x nh), read from `src` (the (space, row, column) where A's and B's 2mh x 2kh and
    2kh x 2nh blocks start) into the workspaces `out` (4mh x kh and 4kh x nh)."""

    mh: int
    kh: int
    nh: int
    src: tuple = (("a", 0, 0), ("b", 0, 0))
    out: tuple = ("sa", "sb")


class Combine(NamedTuple):
    """Winograd's combination pass over the four mh x nh quadrants of the block at `at`
    ((space, row, column): C itself, or a product's scratch block)."""

    mh: int
    nh: int
    at: tuple = ("c", 0, 0)


class AddInto(NamedTuple):
    """A scratch block added into its target: space[row:row+m, col:col+n] += sign * src (two
    levels: an outer product that accumulates, P2, P3, P4, is formed fresh in the scratch
    block by the inner level, then added)."""

    m: int
    n: int
    src: tuple
    target: tuple
    space: str = "c"


MAX_WINOGRAD_LEVELS = 2


def _space(kind: str, depth: int) -> str:
    """Workspace names by depth: "sa"/"sb"/"t" at depth 1, "sa2"/"sb2"/"t2" at depth 2."""
    return kind if depth == 1 else f"{kind}{depth}"


def _winograd(out, m, k, n, xa, yb, at, depth, levels, prefix):
    mh, kh, nh = m // 2, k // 2, n // 2
    sa, sb = _space("sa", depth), _space("sb", depth)
    out.append(WinogradSums(mh, kh, nh, (xa, yb), (sa, sb)))
    for entry in WINOGRAD:
        if entry is None:
            out.append(Combine(mh, nh, at))
            continue
        name, xs, ys, cq, sign, fresh = entry
        x = ((sa, xs[1] * mh, 0) if xs[0] == "sa"
             else (xa[0],) + _quad(xa[1:], xs[1], mh, kh))
        y = ((sb, ys[1] * kh, 0) if ys[0] == "sb"
             else (yb[0],) + _quad(yb[1:], ys[1], kh, nh))
        r, c = _quad(at[1:], cq, mh, nh)
        if depth == levels:
            out.append(Product(prefix + name, mh, kh, nh, x, y,
                                       ((r, c, sign, fresh),), at[0]))
        elif fresh:  # the inner level writes the outer product's block itself (signs are +1)
            _winograd(out, mh, kh, nh, x, y, (at[0], r, c), depth + 1, levels, prefix + name + ".")
        else:  # formed fresh in the scratch block, then added with its sign
            t = (_space("t", depth + 1), 0, 0)
            _winograd(out, mh, kh, nh, x, y, t, depth + 1, levels, prefix + name + ".")
            out.append(AddInto(mh, nh, t, (r, c, sign), at[0]))


@functools.lru_cache(maxsize=64)
def winograd_schedule(m: int, k: int, n: int, levels: int = 1) -> tuple:
    """`levels` (1 or 2) levels of Winograd's form on an m x k @ k x n core (multiples of
    2^levels), C written fresh (beta = 0), in launch order: per level WinogradSums, the four
    fresh products (at two levels each a level of its own, into its C quadrant), Combine, the
    three accumulating products (at two levels each formed in a scratch block, then AddInto)."""
    if not 1 <= levels <= MAX_WINOGRAD_LEVELS:
        raise ValueError(f"levels: Winograd's form runs 1 or 2 levels, got {levels}")
    step = 1 << levels
    if m % step or k % step or n % step:
        raise ValueError(f"the core {m}x{k}x{n} is not a multiple of {step}")
    out: list = []
    _winograd(out, m, k, n, ("a", 0, 0), ("b", 0, 0), ("c", 0, 0), 1, levels, "")
    return tuple(out)


def winograd_workspace(m: int, k: int, n: int, levels: int = 1) -> dict:
    """{space: (rows, columns)} of the workspaces winograd_schedule's launches use: the sums of
    every depth (m·k/4^(d-1) + k·n/4^(d-1) elements at depth d) and the scratch blocks."""
    shapes = {}
    for op in winograd_schedule(m, k, n, levels):
        if isinstance(op, WinogradSums):
            shapes[op.out[0]] = (4 * op.mh, op.kh)
            shapes[op.out[1]] = (4 * op.kh, op.nh)
        elif isinstance(op, AddInto):
            shapes[op.src[0]] = (op.m, op.n)
    return shapes


STAGE_NAMES = {1: "S1", 2: "S3+S4", 3: "S6+S7"}


def label(op) -> str:
    """A launch's row in the per-stage table: its pass, or its leaves' innermost group."""
    if isinstance(op, Pass):
        return STAGE_NAMES[op.stage]
    if isinstance(op, Sums):
        return "sums"
    if isinstance(op, WinogradSums):
        return "wsums"
    if isinstance(op, Combine):
        return "combine"
    if isinstance(op, AddInto):
        return "add"
    if isinstance(op, Product):
        return op.name
    if isinstance(op, SumLeaf):  # Strassen's numbering M1..M7
        return "{" + ",".join(f"M{i + 1}" for i in op.group[-1]) + "}"
    return "{" + ",".join(f"M{i}" for i in op.group[-1]) + "}" if op.group else "leaf"
