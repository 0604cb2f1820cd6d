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

With ``pipeline=k`` every rank's pieces are cut into k runs of columns (``costs.
chunk_segments``, the same k on every rank) and step 2 runs as a pipeline: chunk j + 1's
operands are on their way while chunk j is multiplied, and chunk j's result goes back while
chunk j + 1 is multiplied.  A T_i goes to its owner once, with the owner's first chunk of
product i.  The bytes are those of k = 1 (``strassen_bytes``).
"""

from __future__ import annotations

import re

import array_api_compat

from ..planner.costs import distributed as costs
from . import checks
from .adapters import communicator
from .comm import agree, contiguous, copy_into, empty_like_shape

__all__ = ["strassen_matmul", "strassen_bytes", "WINOGRAD", "CLASSICAL", "ALGORITHMS",
           "LEAVES"]

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
MAX_LEVELS = 3

_BLOCK = re.compile(r"([ABC])(\d+)$")


def program(algorithm: str, levels: int = 1):
    """The bilinear program of `levels` nested levels of `algorithm` (7^L or 8^L products on
    blocks of a 2^L × 2^L split).  Block names carry one quadrant digit per level, outermost
    first: A12 is quadrant 2 of quadrant 1 of A.  Level L+1 is the one-level program applied
    block-wise (each of its additions once per sub-block) with the L-level program inside each
    of its products — every addition stays data-parallel on the strips."""
    base = ALGORITHMS[algorithm]
    prog = base
    for _ in range(levels - 1):
        prog = _compose(base, prog, levels_inner=_depth(prog))
    return prog


def _depth(prog) -> int:
    return len(_BLOCK.match(prog[2][0][0]).group(2))


def _compose(outer, inner, levels_inner):
    """outer (one level) around inner (levels_inner levels): one program on blocks of
    levels_inner + 1 digits."""
    subs = ["".join(d) for d in _digits(levels_inner)]
    n_in = len(inner[2])

    def blockwise(adds):
        return tuple((f"{t}{s}", tuple((c, f"{src}{s}") for c, src in terms))
                     for t, terms in adds for s in subs)

    def rename(name, i, t_name, s_name):
        m = _BLOCK.match(name)
        if m:
            kind, digits = m.groups()
            if kind == "A":
                return t_name + digits
            if kind == "B":
                return s_name + digits
            return f"p{i}:C{digits}"
        if name[0] == "Q" and name[1:].isdigit():
            return f"Q{i * n_in + int(name[1:])}"
        return f"p{i}:{name}"

    pre_a, pre_b, products, post = list(blockwise(outer[0])), list(blockwise(outer[1])), [], []
    for i, (t_name, s_name) in enumerate(outer[2]):
        ren = lambda n: rename(n, i, t_name, s_name)  # noqa: E731
        pre_a += [(ren(t), tuple((c, ren(x)) for c, x in terms)) for t, terms in inner[0]]
        pre_b += [(ren(t), tuple((c, ren(x)) for c, x in terms)) for t, terms in inner[1]]
        products += [(ren(t), ren(x)) for t, x in inner[2]]
        post += [(ren(t), tuple((c, ren(x)) for c, x in terms)) for t, terms in inner[3]]
    # the outer post-additions read Q_i's sub-blocks: the inner program's C blocks of product i
    outer_post = []
    for t, terms in outer[3]:
        for sub in subs:
            outer_post.append((f"{t}{sub}", tuple(
                (c, f"p{x[1:]}:C{sub}" if x[0] == "Q" else f"{x}{sub}") for c, x in terms)))
    return tuple(pre_a), tuple(pre_b), tuple(products), tuple(post) + tuple(outer_post)


def _digits(levels):
    import itertools

    return itertools.product("0123", repeat=levels)


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
    levels = checks.same(table, "levels", "levels", "the level counts")
    pipeline = checks.same(table, "pipeline", "pipeline", "the pipeline counts")
    if pipeline < 1:
        raise ValueError(f"pipeline: expected a positive count of column chunks, got {pipeline}")
    if not 1 <= levels <= MAX_LEVELS:
        raise ValueError(f"levels: expected 1 to {MAX_LEVELS} levels, got {levels}")
    split = 2 ** levels
    m, k = table[0]["m"], table[0]["k"]
    if m % split or k % split:
        raise ValueError(f"a: Strassen over ranks at {levels} level(s) needs m and k divisible "
                         f"by {split}, got m = {m}, k = {k}")
    for field, name in (("acols", "a"), ("bcols", "b")):
        for r, row in enumerate(table):
            if row[field] % split:
                raise ValueError(f"{name}: rank {r} holds {row[field]} columns, not {split} "
                                 f"equal strips (the layout of {levels} level(s))")
    kb = sum(row["acols"] for row in table) // split
    nb = sum(row["bcols"] for row in table) // split
    if kb * split != k:
        raise ValueError(f"a: the strips' widths add up to {split * kb} columns, b has {k} rows; "
                         f"held widths: {checks.group_text(table, 'acols')}")
    for field, block, name in (("acols", kb, "a"), ("bcols", nb, "b")):
        for r, row in enumerate(table):
            c0, c1 = costs.cols_split(block, size, r)
            if row[field] != split * (c1 - c0):
                raise ValueError(
                    f"{name}: rank {r} holds {row[field]} columns; the quadrant-strip layout "
                    f"of {split * block} columns over {size} ranks ({levels} level(s)) gives it "
                    f"{split * (c1 - c0)} (held: {checks.group_text(table, field)})")
    return m // split, kb, nb, levels, pipeline


def strassen_matmul(a, b, /, *, comm, algorithm="strassen_winograd", leaf=None,
                    levels=1, pipeline=1, timeout=None):
    """This rank's strips of ``A @ B`` by Strassen–Winograd (7 products a level) or the
    classical 2 × 2 split (8), over every rank of comm.

    a, b : this rank's strips of A (m × k) and B (k × n) in the quadrant-strip layout of
        `levels` levels (``distributed.quadrant_shard(x, size, rank, levels)``); m, k, n
        divisible by 2^levels.
    algorithm : "strassen_winograd" or "classical".
    levels : nested levels (1 to 3): 7^L (or 8^L) products of blocks of a 2^L × 2^L split,
        every addition data-parallel on the strips.  Two levels of Strassen–Winograd do
        49/64 of the classical split's product work (one: 7/8) for more additions and about
        twice the exchanged bytes (``strassen_bytes``).  On 4 H100s (FP64 N = 32768) two
        levels ran 1.19× the classical split, one level 1.13× (library leaves).
    leaf : "library" (the array library's matmul), "auto" (kronlinalg.matmul, the
        planner's choice) or "strassen" (kronlinalg.strassen_matmul, its planner's level
        count: where a level does not pay it runs the library GEMM) for each product piece.
        None (default): "strassen" for Strassen–Winograd — the fastest measured (4 H100s,
        FP64 N = 32768: 1.23× the classical split and 4.4× one GPU's cuBLAS, against 1.13×
        with library leaves) — and "library" for the classical split (the baseline).  The
        leaves' levels add to the error bound: L levels in all stay within 2 · 3^L × the
        classical product's error.
    pipeline : column chunks each rank's products are cut into; with k > 1 chunk j + 1's
        operands move while chunk j is multiplied, and chunk j's result while chunk j + 1 is
        (NCCL, MPI).  Default 1: on 4 H100s (NCCL, FP64 N = 32768) k = 2 … 16 were 3–7 %
        slower than 1 (docs/performance.md).  The same on every rank (checked); neither the
        bytes sent nor, with cuBLAS, the result depend on it.

    Returns this rank's strips of C (m × n), same layout.  Bad input is the same ValueError on
    every rank before any data moves.
    """
    c = communicator(comm)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    if leaf is None:
        leaf = "strassen" if algorithm == "strassen_winograd" else "library"
    if leaf not in LEAVES:
        raise ValueError(f"leaf: expected one of {LEAVES} or None, got {leaf!r}")
    xp = array_api_compat.array_namespace(a, b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("a: distributed.strassen_matmul takes 2-D strips")
    if a.shape[1] % 2 or b.shape[1] % 2:
        raise ValueError("a: a strip holds two halves (left and right quadrants): an even "
                         f"width is needed, got {a.shape[1]} and {b.shape[1]}")
    fields = {"m": a.shape[0], "k": b.shape[0], "acols": a.shape[1], "bcols": b.shape[1],
              "dtype": checks.dtype_code(_dtype_name(a)) * 16
              + checks.dtype_code(_dtype_name(b)),
              "algorithm": sorted(ALGORITHMS).index(algorithm), "leaf": LEAVES.index(leaf),
              "levels": checks.count(levels, "levels"),
              "pipeline": checks.count(pipeline, "pipeline")}
    table = agree(c, "distributed.strassen_matmul", fields, timeout)
    mb, kb, nb, levels, pipeline = _check(table, c.size)
    if _dtype_name(a) != _dtype_name(b):
        raise TypeError(f"b: its dtype {_dtype_name(b)} differs from a's {_dtype_name(a)}")
    return _Engine(c, xp, a, program(algorithm, levels), (mb, kb, nb), levels, pipeline).run(
        b, _leaf(leaf, xp))


def strassen_bytes(m, k, n, size, rank, itemsize, algorithm="strassen_winograd",
                   levels=1) -> int:
    """Bytes `rank` sends in one call of A (m × k) @ B (k × n) over `size` ranks (the formula
    the byte counter is checked against; the same for every pipeline count): to each owner
    of a piece, its T_i strip once and the S_i columns it holds, then to each rank the part of
    its own pieces that rank's strips cover."""
    products = program(algorithm, levels)[2]
    m2, k2, n2 = m >> levels, k >> levels, n >> levels
    k0, k1 = costs.cols_split(k2, size, rank)
    segs = costs.product_segments(len(products), n2, size)
    values = 0
    for o, pieces in enumerate(segs):
        for _, c0, c1 in pieces:
            cut = [_overlap(c0, c1, costs.cols_split(n2, size, q)) for q in range(size)]
            if o != rank:
                values += m2 * (k1 - k0) + k2 * max(0, cut[rank][1] - cut[rank][0])
            else:
                values += sum(m2 * max(0, hi - lo) for q, (lo, hi) in enumerate(cut) if q != o)
    return values * itemsize


def _overlap(c0, c1, strip):
    return max(c0, strip[0]), min(c1, strip[1])


def _blocks(x, rows, levels, prefix):
    """x's blocks by name (prefix + one quadrant digit a level, outermost first): rows cut into
    2^L row blocks of `rows`, the strip array's columns into its 2^L equal strips."""
    w = x.shape[1] >> levels
    out = {}
    for digits in _digits(levels):
        r = c = 0
        for d in digits:
            r, c = 2 * r + int(d) // 2, 2 * c + int(d) % 2
        out[prefix + "".join(digits)] = x[r * rows:(r + 1) * rows, c * w:(c + 1) * w]
    return out


def _assemble(env, levels, xp):
    """The strip array of the C blocks in env (the inverse of _blocks)."""
    n = 1 << levels
    grid = [[None] * n for _ in range(n)]
    for digits in _digits(levels):
        r = c = 0
        for d in digits:
            r, c = 2 * r + int(d) // 2, 2 * c + int(d) % 2
        grid[r][c] = env["C" + "".join(digits)]
    return xp.concat([xp.concat(row, axis=1) for row in grid], axis=0)


class _Engine:
    """One call's plan (identical on every rank) and this rank's side of it."""

    def __init__(self, c, xp, like, program, dims, levels, pipeline):
        self.c, self.xp, self.like, self.levels = c, xp, like, levels
        self.program, (self.m2, self.k2, self.n2) = program, dims
        size = c.size
        self.products = program[2]
        self.chunks = costs.chunk_segments(len(self.products), self.n2, size, pipeline)
        self.kstrip = [costs.cols_split(self.k2, size, r) for r in range(size)]
        self.nstrip = [costs.cols_split(self.n2, size, r) for r in range(size)]
        # the chunk in which each owner gets T_i (its first chunk of product i)
        self.first = [{} for _ in range(size)]
        for o in range(size):
            for u, pieces in enumerate(self.chunks[o]):
                for i, _, _ in pieces:
                    self.first[o].setdefault(i, u)
        self.last = {}  # this rank's last chunk of product i: T_i may go after it
        for u, pieces in enumerate(self.chunks[c.rank]):
            for i, _, _ in pieces:
                self.last[i] = u

    def cut(self, c0, c1, r):
        """The columns of piece c0:c1 in rank r's strip (empty when lo >= hi)."""
        return _overlap(c0, c1, self.nstrip[r])

    def run(self, b, leaf):
        xp, a, me = self.xp, self.like, self.c.rank
        pre_a, pre_b, _, post = self.program
        env = {**_blocks(a, self.m2, self.levels, "A"), **_blocks(b, self.k2, self.levels, "B")}
        for target, terms in pre_a + pre_b:
            env[target] = _add(terms, env)
        t_full, strips = {}, {}
        operands = self.send_operands(0, env)
        back = None
        for u in range(len(self.chunks[me])):
            got = operands()
            if u + 1 < len(self.chunks[me]):
                # started before chunk u's products are queued: on NCCL's stream it waits
                # for nothing but the packing, so it runs beside them
                operands = self.send_operands(u + 1, env)
            results = self.multiply(u, got, t_full, leaf)
            del got
            returning = self.send_results(u, results)
            del results
            if back is not None:
                self.keep_results(back(), strips)
            back = returning
        self.keep_results(back(), strips)
        for i in range(len(self.products)):
            parts = [x for _, x in sorted(strips.get(i, ()), key=lambda p: p[0])]
            parts = parts or [a[:self.m2, :0]]  # an empty strip (fewer columns than ranks)
            env[f"Q{i}"] = xp.concat(parts, axis=1) if len(parts) > 1 else parts[0]
        for target, terms in post:
            env[target] = _add(terms, env)
        return _assemble(env, self.levels, xp)

    def send_operands(self, u, env):
        """Chunk u's exchange 1: each owner gets the T_i strips it has not had yet and the
        S_i columns of its chunk-u pieces that this rank holds."""
        me, size = self.c.rank, self.c.size
        sends, shapes = {}, {}
        for o in range(size):
            for i, c0, c1 in self.chunks[o][u]:
                t_name, s_name = self.products[i]
                if self.first[o][i] == u:
                    sends.setdefault(o, []).append(env[t_name])
                lo, hi = self.cut(c0, c1, me)
                if lo < hi:
                    n0 = self.nstrip[me][0]
                    sends.setdefault(o, []).append(env[s_name][:, lo - n0:hi - n0])
        for q in range(size):
            for i, c0, c1 in self.chunks[me][u]:
                if self.first[me][i] == u:
                    k0, k1 = self.kstrip[q]
                    shapes.setdefault(q, []).append((self.m2, k1 - k0))
                lo, hi = self.cut(c0, c1, q)
                if lo < hi:
                    shapes.setdefault(q, []).append((self.k2, hi - lo))
        return _start_lists(self.c, self.xp, sends, shapes, self.like)

    def multiply(self, u, got, t_full, leaf):
        """This rank's chunk-u pieces, [(product, c0, c1, T_i @ S_i[:, c0:c1])]."""
        xp, size = self.xp, self.c.size
        items = {q: iter(parts) for q, parts in got.items()}
        out = []
        for i, c0, c1 in self.chunks[self.c.rank][u]:
            if self.first[self.c.rank][i] == u:
                t_parts = [next(items[q]) for q in range(size)]
                t_full[i] = xp.concat(t_parts, axis=1) if size > 1 else t_parts[0]
            s_parts = [next(items[q]) for q in range(size) if
                       self.cut(c0, c1, q)[0] < self.cut(c0, c1, q)[1]]
            s_cols = xp.concat(s_parts, axis=1) if len(s_parts) > 1 else s_parts[0]
            out.append((i, c0, c1, leaf(t_full[i], s_cols)))
            if self.last[i] == u:
                del t_full[i]
        return out

    def send_results(self, u, results):
        """Chunk u's exchange 2: every rank gets its strip's columns of the chunk's pieces."""
        me, size = self.c.rank, self.c.size
        sends, shapes = {}, {}
        for i, c0, c1, q_piece in results:
            for q in range(size):
                lo, hi = self.cut(c0, c1, q)
                if lo < hi:
                    sends.setdefault(q, []).append(q_piece[:, lo - c0:hi - c0])
        for o in range(size):
            for i, c0, c1 in self.chunks[o][u]:
                lo, hi = self.cut(c0, c1, me)
                if lo < hi:
                    shapes.setdefault(o, []).append((self.m2, hi - lo))
        pending = _start_lists(self.c, self.xp, sends, shapes, self.like)
        return lambda: (u, pending())

    def keep_results(self, done, strips):
        u, got = done
        me = self.c.rank
        for o in range(self.c.size):
            items = iter(got.get(o, ()))
            for i, c0, c1 in self.chunks[o][u]:
                lo, hi = self.cut(c0, c1, me)
                if lo < hi:
                    strips.setdefault(i, []).append((lo, next(items)))


def _pack(xp, parts, like):
    """One flat contiguous buffer holding the 2-D parts one after another (row-major)."""
    if len(parts) == 1:
        return xp.reshape(contiguous(parts[0]), (-1,))
    sizes = [int(x.shape[0]) * int(x.shape[1]) for x in parts]
    buf = empty_like_shape(like, (sum(sizes),))
    pos = 0
    for x, n in zip(parts, sizes):
        copy_into(xp.reshape(buf[pos:pos + n], tuple(x.shape)), x)
        pos += n
    return buf


def _start_lists(c, xp, sends, shapes, like):
    """Begin sending each peer a list of 2-D arrays (packed into one flat buffer) and
    receiving lists of the given shapes; returns a callable giving {peer: [arrays]} (the
    rank's own list passed through)."""
    flat_sends = {p: _pack(xp, parts, like) for p, parts in sends.items() if p != c.rank}
    recv_shapes = {q: (sum(r * w for r, w in s),) for q, s in shapes.items() if q != c.rank}
    pending = c.exchange_start(flat_sends, recv_shapes, like)

    def finish():
        got = pending.wait()
        out = {c.rank: list(sends[c.rank])} if c.rank in sends else {}
        for q, buf in got.items():
            items, pos = [], 0
            for r, w in shapes[q]:
                items.append(xp.reshape(buf[pos:pos + r * w], (r, w)))
                pos += r * w
            out[q] = items
        return out

    return finish
