"""Issue 33's CPU criterion on a fixed grid: kronlinalg.batched_matmul and kronlinalg.matmul
against numpy.matmul on stacks of small products ("CPU: correct; >= 2x NumPy's matmul on stacks
of order <= 32, >= 0.95x elsewhere").

    python benchmarks/batched_cpu_grid.py --json /tmp/grid.json            # threads unset
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/batched_cpu_grid.py --json ...
    python benchmarks/batched_cpu_grid.py --compare before.json after.json  # the table

Grid: square orders 1-32 (every one) and 33, 40, 48, 64, 96, 128 (batch x order^3 capped), and
non-square (m, k, n) products; batches 4, 16, 100, 1000, 10^4; float32 and float64.  Each
point: every call timed with timeit (enough calls for ~2 ms a measurement), the three callers
interleaved round by round, best of --reps rounds.  Every point's two results are checked
against a float64 reference first (the kernels are bitwise deterministic: a second call must
give the same bits).  "x" = NumPy's time / ours (>= 2 wanted at order <= 32, >= 0.95 above).
"""

import argparse
import json
import os
import platform
import sys
import timeit

import numpy as np

import kronlinalg

BATCHES = (4, 16, 100, 1000, 10_000)
SMALL = tuple(range(1, 33))
LARGE = (33, 40, 48, 64, 96, 128)
# non-square (m, k, n): thin, wide, low-rank, odd
RECT = ((4, 16, 4), (16, 4, 16), (8, 32, 3), (3, 32, 8), (13, 7, 29), (29, 13, 7), (32, 1, 32),
        (1, 32, 1), (2, 24, 31), (31, 2, 24), (16, 32, 8), (5, 5, 32), (48, 16, 48), (64, 8, 64),
        (40, 64, 24))
MAX_WORK = 4e9  # flops of one stack above which a point is skipped (order 128 x 10^4: 4e10)


def shapes(quick):
    out = []
    orders = (1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 24, 31, 32, 48, 64) if quick else SMALL + LARGE
    for n in orders:
        out.append((n, n, n))
    out.extend(RECT[::3] if quick else RECT)
    return out


def check(dt, a, b, got, name):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = (64 if dt == "float64" else 1) * np.finfo(dt).eps * a.shape[-1]
    scale = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))) + 1e-300
    err = float(np.max(np.abs(got - ref) / scale)) if got.size else 0.0
    if got.shape != ref.shape or got.dtype != np.dtype(dt) or not err <= tol:
        raise SystemExit(f"{name} wrong: {dt} {a.shape} @ {b.shape}: error {err:.2e} > {tol:.1e}")


def time_point(fns, reps, budget=2e-3):
    """Best per-call seconds of each fn, rounds interleaved."""
    timers = {k: timeit.Timer(f) for k, f in fns.items()}
    number = {}
    for k, t in timers.items():
        n, el = t.autorange()  # (also the warm-up)
        number[k] = max(1, int(n * budget / max(el, 1e-9)))
    best = {k: float("inf") for k in fns}
    for _ in range(reps):
        for k, t in timers.items():
            best[k] = min(best[k], t.timeit(number[k]) / number[k])
    return best


def run(args):
    rng = np.random.default_rng(0)
    rows = []
    for dt in args.dtypes:
        grid = ([tuple(int(v) for v in s.split(",")) for s in args.only] if args.only
                else shapes(args.quick))
        for (m, k, n) in grid:
            for batch in BATCHES:
                if 2.0 * batch * m * k * n > MAX_WORK:
                    continue
                a = rng.standard_normal((batch, m, k)).astype(dt)
                b = rng.standard_normal((batch, k, n)).astype(dt)
                fns = {"numpy": lambda: np.matmul(a, b),
                       "batched": lambda: kronlinalg.batched_matmul(a, b),
                       "matmul": lambda: kronlinalg.matmul(a, b)}
                first = {}
                for name in ("batched", "matmul"):
                    first[name] = fns[name]()
                    check(dt, a, b, first[name], name)
                t = time_point(fns, args.reps)
                for name in ("batched", "matmul"):  # repeated calls: the same bits
                    if not np.array_equal(fns[name](), first[name]):
                        raise SystemExit(f"{name} not deterministic: {dt} {(m, k, n)} {batch}")
                row = {"dtype": dt, "m": m, "k": k, "n": n, "batch": batch,
                       "numpy_us": t["numpy"] * 1e6, "batched_us": t["batched"] * 1e6,
                       "matmul_us": t["matmul"] * 1e6,
                       "pick": kronlinalg.plan("batched_matmul", a.shape, b.shape,
                                               dtype=dt)[0].name}
                rows.append(row)
                print(f"{dt} {m:3d}x{k:3d}x{n:3d} batch {batch:6d}: numpy {row['numpy_us']:10.2f} "
                      f"us  batched {t['numpy'] / t['batched']:5.2f}x  matmul "
                      f"{t['numpy'] / t['matmul']:5.2f}x  ({row['pick']})", flush=True)
    return rows


def target(row):
    return 2.0 if max(row["m"], row["k"], row["n"]) <= 32 else 0.95


def summary(rows, label=""):
    lines = []
    for name in ("batched", "matmul"):
        met = sum(r["numpy_us"] / r[name + "_us"] >= target(r) for r in rows)
        lines.append(f"{label}{name}: criterion met at {met}/{len(rows)} points")
    return lines


def summary_table(rows, key):
    """Markdown: per dtype and batch, the points meeting the target and the worst x, for
    products of order <= 32 (target 2) and above (target 0.95)."""
    out = ["| dtype | batch | order ≤ 32: met, worst x (shape) | above 32: met, worst x (shape) |",
           "|---|---|---|---|"]
    for dt in dict.fromkeys(r["dtype"] for r in rows):
        for bt in BATCHES:
            cells = []
            for small in (True, False):
                sel = [r for r in rows if r["dtype"] == dt and r["batch"] == bt
                       and (max(r["m"], r["k"], r["n"]) <= 32) == small]
                if not sel:
                    cells.append("")
                    continue
                met = sum(r["numpy_us"] / r[key] >= target(r) for r in sel)
                worst = min(sel, key=lambda r: r["numpy_us"] / r[key])
                cells.append(f"{met}/{len(sel)}, {worst['numpy_us'] / worst[key]:.2f} "
                             f"({worst['m']}×{worst['k']}×{worst['n']})")
            out.append(f"| {dt} | {bt} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def table(rows, key):
    """Markdown: x (NumPy / ours) per order and batch, one line per dtype and order."""
    out = ["| dtype | m×k×n | " + " | ".join(f"batch {b}" for b in BATCHES) + " |",
           "|---|---|" + "---|" * len(BATCHES)]
    index = {(r["dtype"], r["m"], r["k"], r["n"], r["batch"]): r for r in rows}
    for (dt, m, k, n) in dict.fromkeys((r["dtype"], r["m"], r["k"], r["n"]) for r in rows):
        cells = []
        for b in BATCHES:
            r = index.get((dt, m, k, n, b))
            cells.append("" if r is None else f"{r['numpy_us'] / r[key]:.2f}")
        out.append(f"| {dt} | {m}×{k}×{n} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def compare(before, after, key):
    """Markdown: before -> after x per point, with the target."""
    b_index = {(r["dtype"], r["m"], r["k"], r["n"], r["batch"]): r for r in before}
    out = ["| dtype | m×k×n | " + " | ".join(f"batch {b}" for b in BATCHES) + " |",
           "|---|---|" + "---|" * len(BATCHES)]
    seen = dict.fromkeys((r["dtype"], r["m"], r["k"], r["n"]) for r in after)
    a_index = {(r["dtype"], r["m"], r["k"], r["n"], r["batch"]): r for r in after}
    for (dt, m, k, n) in seen:
        cells = []
        for bt in BATCHES:
            ra, rb = a_index.get((dt, m, k, n, bt)), b_index.get((dt, m, k, n, bt))
            if ra is None:
                cells.append("")
                continue
            xa = ra["numpy_us"] / ra[key]
            mark = "" if xa >= target(ra) else "*"
            xb = f"{rb['numpy_us'] / rb[key]:.2f} → " if rb else ""
            cells.append(f"{xb}{xa:.2f}{mark}")
        out.append(f"| {dt} | {m}×{k}×{n} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--quick", action="store_true", help="a subset of the orders")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    p.add_argument("--only", nargs="+", metavar="M,K,N", help="these (m, k, n) only")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                   help="print the before/after tables of two --json files")
    args = p.parse_args()
    if args.compare:
        with open(args.compare[0]) as f:
            before = json.load(f)["rows"]
        with open(args.compare[1]) as f:
            after = json.load(f)["rows"]
        for key in ("batched_us", "matmul_us"):
            print(f"\n{key[:-3]} (NumPy time / ours, before → after; * below target)\n")
            print(compare(before, after, key))
            for label, rows in (("before", before), ("after", after)):
                print(f"\n{key[:-3]}, {label}\n")
                print(summary_table(rows, key))
        print("\n".join(summary(before, "before ") + summary(after, "after ")))
        return 0
    env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy "
          f"{np.__version__}, env {env}", flush=True)
    rows = run(args)
    print("\n".join(summary(rows)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "numpy": np.__version__, "rows": rows}, f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
