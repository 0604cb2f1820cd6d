"""Compare the CUDA launcher's own tile choice (ks.h kl_ks_cuda_tile, through
kronlinalg.testing.extension("structured_cuda").tile: no launch, no GPU) with the Python mirror
that kronlinalg/structured.py kept at 2606116 (_cuda_tile and its tables, copied below verbatim
but for the float32 mode, which is passed in), over a grid of patterns, batches, layouts, dtypes
and SM counts (issue 38, item 3).  Run: python benchmarks/structured_tiles_vs_mirror.py"""
import collections
import itertools
import math
import sys

import kronlinalg.structured as ks
from kronlinalg.testing import extension

MODE = "tf32x3"


def float32_precision():
    return MODE


# --- the mirror, from `git show HEAD:kronlinalg/structured.py` ---------------------------------
_CUDA_F32_TILES = {1: ((32, 512), (128, 128)), 2: ((64, 128),), 4: ((16, 256), (64, 64)),
                   8: ((32, 64),), 16: ((16, 64),)}
_CUDA_HALF_TILES = {1: (64, 128), 2: (32, 128), 4: (16, 128), 8: (16, 64), 16: (16, 32)}


def _cuda_tj(d) -> int:
    if d in (1, 2, 4, 8, 16):
        return d
    for t in (16, 8, 4):
        if d % t == 0:
            return t
    return 4 if d < 4 else (8 if d < 8 else 16)


_CUDA_PIPE_TILES = {2: (128, 64, 32, 2), 3: (64, 64, 32, 3), 6: (64, 32, 16, 6),
                    8: (64, 32, 16, 8), 4: (64, 64, 16, 4), 1: (128, 128, 16, 1)}
_CUDA_PIPE_WIDE = {2: (128, 128), 6: (64, 64), 8: (64, 64), 4: (128, 64)}


def _cuda_wide_pays(p, first) -> bool:
    b, c, d = p[1], p[2], p[3]
    if d % 8 == 0:
        return first or b * c >= 128 * 128
    if d % 4 == 0 and d != 4:
        return b * c >= 128 * 128
    return d in (2, 6) and first and b * c >= 2 * 128 * 128


def _cuda_pipelined(p, s_e) -> bool:
    return p[2] % 8 == 0 and (s_e == 2 or float32_precision() == "tf32x3")


def _cuda_tile(p, s_e, B=0, units=0, first=True) -> tuple:
    b, d = p[1], p[3]
    if _cuda_pipelined(p, s_e) and s_e == 2 and B > 0 and _cuda_wide_pays(p, first):
        tn, tk, tl, tj = _cuda_tile(p, s_e)
        wide = _CUDA_PIPE_WIDE[d if d in (2, 6) else tj]
        blocks = p[0] * math.ceil(d / tj) * math.ceil(B / wide[0]) * math.ceil(b / wide[1])
        if blocks >= 2 * units:
            return (*wide, tl, tj)
    if _cuda_pipelined(p, s_e):
        if d == 1 and s_e == 4 and b * p[2] <= 384 * 512 and (not first or b > 64):
            tn, tk, tl, tj = 128, 64, 16, 1  # (4-warp tiles)
        elif d == 1:
            tn, tk, tl, tj = (256, 64, 64, 1) if -b % 64 < -b % 128 else (128, 128, 64, 1)
        elif d in (2, 3, 6):
            tn, tk, tl, tj = _CUDA_PIPE_TILES[d]
        else:
            tn, tk, tl, tj = _CUDA_PIPE_TILES[next(t for t in (8, 4, 2, 1) if d % t == 0)]
            if tj == 2:  # d % 4 == 2 beyond 2 and 6: runs of two j
                tn, tk, tl = 128, 64, 32
        if s_e == 4:  # float32: l chunks of 16 (d = 1) or 8
            tl = 16 if d == 1 else 8
        return tn, tk, tl, tj
    tj = _cuda_tj(d)
    if s_e == 2:
        tk, tn = _CUDA_HALF_TILES[tj]
        return tn, tk, 16, tj
    shapes = _CUDA_F32_TILES[tj]
    tk, tn = min(shapes, key=lambda s: math.ceil(b / s[0]) * s[0] / b + 8.0 / s[0])
    return tn, tk, (8 if tj < 4 else 4), tj
# -------------------------------------------------------------------------------------------------


def classify(p, B, first, code, units, mine, theirs):
    """A short description of a disagreement's class."""
    half = code != 0
    pipe_mirror = _cuda_pipelined(p, 2 if half else 4)
    pipe_c = mine[4] in (1, 2, 3)
    if pipe_mirror != pipe_c:
        return f"pipelined: mirror {pipe_mirror}, launcher {pipe_c}"
    return f"mirror {theirs} -> launcher {tuple(mine[:4])} kind {mine[4]}"


def main():
    ext = extension("structured_cuda")
    if ext is None:
        sys.exit("the CUDA extension is not built")
    A, BC = (1, 2, 4), (8, 16, 24, 32, 64, 96, 128, 256, 512, 1024)
    D = tuple(range(1, 17)) + (24, 32)
    batches = (1, 7, 64, 1000, 25088)
    runs = [("tf32x3", 0), ("ieee", 0), (None, 2), (None, 3)]
    total = agree = 0
    kinds = collections.Counter()
    classes = collections.Counter()
    examples = {}
    per_run = collections.Counter()
    per_run_agree = collections.Counter()
    both = collections.Counter()
    kind_only = collections.Counter()
    global MODE
    for mode, code in runs:
        if mode is not None:
            ks.float32_precision(mode)
            MODE = mode
            assert ext.float32_mode() == (0 if mode == "tf32x3" else 1)
        label = f"f32/{mode}" if code == 0 else ("f16" if code == 2 else "bf16")
        for units in (132, 108):
            for a, b, c, d, B, layout in itertools.product(A, BC, BC, D, batches, (0, 1)):
                p = (a, b, c, d)
                mine = ext.tile(p, B, layout, code, units)
                theirs = _cuda_tile(p, 4 if code == 0 else 2, B, units, layout == 0)
                kinds[(label, mine[4])] += 1
                total += 1
                per_run[(label, units)] += 1
                same_kind = _cuda_pipelined(p, 4 if code == 0 else 2) == (mine[4] != 0)
                both[(label, units)] += tuple(mine[:4]) == tuple(theirs) and same_kind
                if tuple(mine[:4]) == tuple(theirs) and not same_kind:
                    kind_only[f"{label}: pipelined: mirror {not same_kind ^ (mine[4] != 0)}, launcher {mine[4] != 0}, d={p[3]}"] += 1
                if tuple(mine[:4]) == tuple(theirs):
                    agree += 1
                    per_run_agree[(label, units)] += 1
                else:
                    cls = classify(p, B, layout == 0, code, units, mine, theirs)
                    cls = f"{label}: {cls}"
                    classes[cls] += 1
                    ex = examples.setdefault(cls, [set(), set(), set(), set(), set(), (p, B, layout, units)])
                    ex[0].add(p[3]); ex[1].add(B); ex[2].add(layout); ex[3].add(units); ex[4].add((p[1], p[2]))
    ks.float32_precision("tf32x3")
    print(f"agreement on (TN, TK, TL, TJ): {agree}/{total} = {agree / total:.4%}")
    for k in sorted(per_run):
        print(f"  {k}: {per_run_agree[k]}/{per_run[k]}")
    nb = sum(both.values())
    print(f"agreement on the tile and on pipelined or not (kinds 1, 2, 3 vs 0): {nb}/{total} = {nb / total:.4%}")
    for k in sorted(both):
        print(f"  {k}: {both[k]}/{per_run[k]}")
    print("same tile, other kernel:", dict(kind_only))
    print("kinds the launcher chose:", dict(sorted(kinds.items())))
    print(f"{len(classes)} classes of disagreement:")
    for cls, n in sorted(classes.items(), key=lambda t: -t[1]):
        ex = examples[cls]
        bc = sorted(ex[4])
        print(f"  {n:6d}  {cls}\n          d={sorted(ex[0])} B={sorted(ex[1])} layouts={sorted(ex[2])} "
              f"units={sorted(ex[3])} (b,c): {len(bc)} pairs, e.g. {bc[:3]}..{bc[-2:]}; e.g. {ex[5]}")
    # the wgmma shapes (units < 0: an sm_90 with wgmma), which the mirror does not know
    wg = collections.Counter()
    for code in (2, 3):
        for a, b, c, d, B in itertools.product(A, BC, BC, D, batches):
            t = ext.tile((a, b, c, d), B, 0, code, -132)
            if t[4] == 3:
                wg[(d, t[:4])] += 1
    print("wgmma (units=-132, half types batch_first):", dict(sorted(wg.items())))


if __name__ == "__main__":
    main()
