"""CPU kron_matmul against its peers, on the shared benchmark sets, in one run.

    python benchmarks/kron_cpu_compare.py [--quick] [--json PATH] [--cases PATH]

For each case of ``kron_large`` (M scaled down for a small CPU: x of at most ~2^24 elements),
``kron_small`` (as given) and ``real_world`` (the 28 sizes of FastKron's Table 4 -- LSTM/RNN,
ML compression, HyPA, graphs, biology, drug targets, Gaussian processes -- M scaled the same way
where x would pass ~2^24 elements), in float32 and float64, it times

* ours:       ``kronlinalg.kron_matmul(x, factors, algorithm="sliced")``
* pyfastkron: ``pyfastkron.fastkronnumpy.gemkm(x, factors)`` (its x86 kernel; "n/a" when it
              raises, "fb" when it silently falls back to its own shuffle)
* shuffle:    ``kronlinalg.kron_matmul(x, factors, algorithm="shuffle")`` (NumPy's matmul,
              reshape–matmul–transpose, what GPyTorch and PyKronecker do)

after one warm-up call each, interleaved (rounds of a block of calls of each library) so a
busy shared machine slows all three alike, as the median of all calls (fewer for cases over a
second; a case where ours comes out slower than a peer is timed again, up to twice, and the
calls pooled), and checks our result against the others (relative Frobenius error).  GFLOP/s counts the sliced
multiply's 2 * M * sum_i (L_i / P_i) * P_i * Q_i flops, L_i the row length before factor i.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

import kronlinalg
from kronlinalg.planner import kron_flops

_HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CASES = os.path.join(_HERE, "..", "..", "shared", "bench", "cases.json")

# The sets of /work/shared/bench/cases.json, for when that file is not at hand.
FALLBACK = {
    "kron_large": [[1024, 8, 6], [1024, 8, 7], [1024, 16, 5], [1024, 32, 4], [1024, 64, 3],
                   [1024, 128, 3], [16, 8, 8], [16, 16, 6], [16, 32, 5], [16, 64, 4]],
    "kron_small": [[16, [[2, 2], 10]], [64, [[4, 4], 5]], [8, [[8, 8], 3]], [32, [[3, 3], 6]],
                   [4, [[16, 16], 3]], [128, [[5, 7], [3, 2], [11, 4]]]],
}

# FastKron (PPoPP'24) Table 4, ids 1-28: (M, factor shapes); several M for one shape are
# several cases.
def _sq(p, n):
    return [[p, p]] * n


REAL_WORLD = (
    [[20, _sq(2, 7)], [20, _sq(2, 9)], [50, _sq(2, 9)], [20, _sq(2, 10)], [1, _sq(2, 11)]]  # LSTM/RNN
    + [[10, [[52, 50], [65, 20]]], [50, [[32, 8], [64, 128]]], [10, [[52, 65], [50, 20]]]]  # ML compr.
    + [[m, _sq(2, 9)] for m in (4, 8, 16, 20)] + [[m, _sq(8, 3)] for m in (4, 8, 16, 20)]  # HyPA
    + [[1024, _sq(3, 7)], [1024, _sq(4, 7)], [1024, _sq(6, 7)]]  # graphs
    + [[1, _sq(5, 3) + [[2, 2]]], [1, _sq(5, 2) + [[2, 2], [25, 25]]]]  # biology
    + [[1526, _sq(4, 6)], [156, _sq(8, 3)], [2967, _sq(4, 7)]]  # drug targets
    + [[16, _sq(8, 8)], [16, _sq(16, 6)], [16, _sq(32, 6)], [16, _sq(64, 3)]]  # Gaussian processes
)

X_BUDGET = 2**24  # elements of x we aim for
X_LIMIT = 2**25  # beyond this even at M = 16, drop factors
M_MIN, M_MAX = 16, 256


def load_cases(path):
    try:
        with open(path) as fh:
            data = json.load(fh)
        return data["kron_large"]["cases"], data["kron_small"]["cases"], path
    except (OSError, KeyError, ValueError):
        return FALLBACK["kron_large"], FALLBACK["kron_small"], "built-in copy"


def scale_large(m0, p, n):
    """(M, N, note) for a kron_large case (m0, p, n) that fits this machine."""
    k = p**n
    m = 1 << max(0, int(math.log2(max(1, X_BUDGET // k))))
    m = max(M_MIN, min(M_MAX, m, m0))
    note = f"M {m0}->{m}" if m != m0 else ""
    n_used = n
    while n_used > 1 and m * p**n_used > X_LIMIT:
        n_used -= 1
    if n_used != n:
        note += f", N {n}->{n_used}"
    return m, n_used, note.strip(", ")


def scale_rows(m0, shapes):
    """(M, shapes, note) for a case whose x (M x prod P) must stay near X_BUDGET elements."""
    k = math.prod(p for p, _ in shapes)
    if m0 * k <= X_BUDGET:
        return m0, shapes, ""
    m = 1 << max(0, int(math.log2(max(1, X_BUDGET // k))))
    m = max(min(M_MIN, m0), min(M_MAX, m, m0))
    note = f"M {m0}->{m}" if m != m0 else ""
    n0 = len(shapes)
    while len(shapes) > 1 and m * math.prod(p for p, _ in shapes) > X_LIMIT:
        shapes = shapes[1:]
    if len(shapes) != n0:
        note += f", N {n0}->{len(shapes)}"
    return m, shapes, note.strip(", ")


def case_name(shapes):
    """Runs of equal shapes as PxQ^n, joined by commas."""
    parts, i = [], 0
    while i < len(shapes):
        j = i
        while j < len(shapes) and shapes[j] == shapes[i]:
            j += 1
        parts.append(f"{shapes[i][0]}x{shapes[i][1]}" + (f"^{j - i}" if j - i > 1 else ""))
        i = j
    return ",".join(parts)


def small_shapes(spec):
    """[[P, Q], N] -> N copies of (P, Q); a list of [P, Q] -> those shapes."""
    if len(spec) == 2 and isinstance(spec[1], int) and isinstance(spec[0], list):
        return [tuple(spec[0])] * spec[1]
    return [tuple(s) for s in spec]


def build_cases(large, small, quick, sets=("kron_large", "kron_small", "real_world")):
    cases = []
    for m0, p, n in large:
        m, n_used, note = scale_large(m0, p, n)
        cases.append({"set": "kron_large", "name": f"{p}^{n_used}", "M": m,
                      "shapes": [(p, p)] * n_used, "note": note, "orig": [m0, p, n]})
    for m, spec in small:
        shapes = small_shapes(spec)
        if len(set(shapes)) == 1:
            name = f"{shapes[0][0]}x{shapes[0][1]}^{len(shapes)}"
        else:
            name = ",".join(f"{p}x{q}" for p, q in shapes)
        cases.append({"set": "kron_small", "name": name, "M": m, "shapes": shapes, "note": "",
                      "orig": [m, spec]})
    for m0, spec in REAL_WORLD:
        m, shapes, note = scale_rows(m0, [tuple(s) for s in spec])
        cases.append({"set": "real_world", "name": case_name(shapes), "M": m, "shapes": shapes,
                      "note": note, "orig": [m0, spec]})
    cases = [c for c in cases if c["set"] in sets]
    if quick:
        keep = {"8^6", "16^5", "64^3", "2x2^10", "8x8^3", "5x7,3x2,11x4", "2x2^9", "4x4^6"}
        cases = [c for c in cases if c["name"] in keep]
        # one of each name only
        seen, uniq = set(), []
        for c in cases:
            if c["name"] not in seen:
                seen.add(c["name"])
                uniq.append(c)
        cases = uniq
    return cases



def time_interleaved(fns, min_runs=5, budget_s=3.0, rounds=5):
    """{name: (seconds of each timed call, first result)}: one warm-up call each, then `rounds` rounds
    that run each function in turn, a block of calls each (a busy shared machine slows all of
    them alike; blocks, not single calls, so one library's OpenMP threads still spinning after
    its call do not land on the next library's first call: each block starts with an untimed
    call).  Several calls a function when one takes under a second, down to 1 over 5 s."""
    outs, first = {}, {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        outs[name] = fn()
        first[name] = time.perf_counter() - t0
    slowest = max(first.values())
    runs = min_runs if slowest < 1.0 else (3 if slowest < 5.0 else 1)
    if sum(first.values()) < budget_s / (4 * min_runs):  # fast cases: more calls in the budget
        runs = max(min_runs, min(100, int(budget_s / max(sum(first.values()), 1e-6) / 4)))
    rounds = max(1, min(rounds, runs))
    per_block = -(-runs // rounds)
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            if first[name] < 0.1:
                fn()  # untimed: the previous library's threads settle
            for _ in range(per_block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: (times[name], outs[name]) for name in fns}


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / nb) if nb else float(np.linalg.norm(a))


def _pyfastkron():
    try:
        from pyfastkron import fastkronnumpy
        import pyfastkron

        return fastkronnumpy, getattr(pyfastkron, "__version__", "?")
    except Exception as exc:  # not installed, or no x86 library
        return None, f"unavailable ({exc})"


def run_case(case, dtype, rng, fk):
    m, shapes = case["M"], case["shapes"]
    k = math.prod(p for p, _ in shapes)
    x = rng.standard_normal((m, k)).astype(dtype)
    fs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    row = {"dtype": dtype, "set": case["set"], "case": case["name"], "M": m,
           "shapes": [list(s) for s in shapes], "note": case["note"],
           "gflop": kron_flops(m, shapes) / 1e9}

    fns = {"ours": lambda: kronlinalg.kron_matmul(x, fs, algorithm="sliced"),
           "shuffle": lambda: kronlinalg.kron_matmul(x, fs, algorithm="shuffle")}
    row["ms_pyfastkron"], row["pyfastkron"] = None, "n/a"
    native = False
    if fk is not None:
        try:
            native = fk.fastkronnumpy.isSupported(x, fs)
            fk.gemkm(x, fs)
            fns["pyfastkron"] = lambda: fk.gemkm(x, fs)
        except Exception as exc:  # pyfastkron rejects some shapes
            row["pyfastkron"] = f"n/a ({type(exc).__name__}: {str(exc)[:60]})"
    res = time_interleaved(fns)
    ours = res["ours"][1]
    row["err_vs_shuffle"] = rel_err(ours, res["shuffle"][1])
    if "pyfastkron" in res:
        row["pyfastkron"] = "x86" if native else "fallback"
        row["err_vs_pyfastkron"] = rel_err(ours, np.reshape(res["pyfastkron"][1], ours.shape))
    times = {name: t for name, (t, _) in res.items()}
    del res
    # A case where we come out slower is timed again (up to twice more), every library alike,
    # and the calls pooled: a busy shared machine can slow one library's block of calls.
    row["repeats"] = 0
    while row["repeats"] < 2 and any(statistics.median(t) < statistics.median(times["ours"])
                                     for name, t in times.items() if name != "ours"):
        row["repeats"] += 1
        for name, (t, _) in time_interleaved(fns).items():
            times[name] += t
    row["runs"] = len(times["ours"])
    row["ms_ours"] = statistics.median(times["ours"]) * 1e3
    row["ms_shuffle"] = statistics.median(times["shuffle"]) * 1e3
    if "pyfastkron" in times:
        row["ms_pyfastkron"] = statistics.median(times["pyfastkron"]) * 1e3
    row["gflops_ours"] = row["gflop"] / (row["ms_ours"] / 1e3)
    return row


def _fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def table(rows):
    head = ("| dtype | set | case | M | ms ours | ms pyfastkron | ms shuffle | speedup vs pyfastkron "
            "| speedup vs shuffle | GFLOP/s ours | max rel err |")
    lines = [head, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        sp_fk = (r["ms_pyfastkron"] / r["ms_ours"]) if r["ms_pyfastkron"] else None
        sp_sh = r["ms_shuffle"] / r["ms_ours"]
        fk = _fmt(r["ms_pyfastkron"], ".3f")
        if r["pyfastkron"] == "fallback":
            fk += " (fb)"
        elif r["ms_pyfastkron"] is None:
            fk = "n/a"
        err = max(r["err_vs_shuffle"], r.get("err_vs_pyfastkron") or 0.0)
        case = r["case"] + (f" ({r['note']})" if r["note"] else "")
        if r.get("repeats"):
            case += f" [timed {r['repeats'] + 1}x]"
        lines.append(f"| {r['dtype']} | {r['set']} | {case} | {r['M']} | {r['ms_ours']:.3f} | {fk} | "
                     f"{r['ms_shuffle']:.3f} | {_fmt(sp_fk, '.2f')} | {sp_sh:.2f} | "
                     f"{r['gflops_ours']:.1f} | {err:.1e} |")
    return "\n".join(lines)


def summary(rows):
    out = []
    groups = [(d, None) for d in sorted({r["dtype"] for r in rows})]
    groups += [("all", st) for st in sorted({r["set"] for r in rows})] + [("all", None)]
    for dtype, st in groups:
        sel = [r for r in rows if dtype in ("all", r["dtype"]) and st in (None, r["set"])]
        fk = [r["ms_pyfastkron"] / r["ms_ours"] for r in sel
              if r["ms_pyfastkron"] and r["pyfastkron"] == "x86"]
        sh = [r["ms_shuffle"] / r["ms_ours"] for r in sel]
        label = dtype if st is None else st
        out.append(f"median speedup {label:10s}: vs pyfastkron "
                   f"{_fmt(statistics.median(fk) if fk else None, '.2f')}x "
                   f"({len(fk)} cases), vs shuffle {statistics.median(sh):.2f}x "
                   f"({len(sh)} cases)")
    slow = []
    for r in rows:
        peers = [("shuffle", r["ms_shuffle"])]
        if r["ms_pyfastkron"] and r["pyfastkron"] == "x86":
            peers.append(("pyfastkron", r["ms_pyfastkron"]))
        slow += [f"{r['dtype']} M={r['M']} {r['case']} ({name} {ms / r['ms_ours']:.2f}x)"
                 for name, ms in peers if ms < r["ms_ours"]]
    out.append("slower than a peer on: " + ("; ".join(slow) if slow else "none"))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=DEFAULT_CASES, help="cases.json of the shared bench sets")
    ap.add_argument("--json", metavar="PATH", help="write the raw numbers here")
    ap.add_argument("--quick", action="store_true", help="a few cases only")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"],
                    choices=["float32", "float64"])
    ap.add_argument("--sets", nargs="+", default=["kron_large", "kron_small", "real_world"],
                    choices=["kron_large", "kron_small", "real_world"])
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)

    large, small, source = load_cases(args.cases)
    cases = build_cases(large, small, args.quick, args.sets)
    fk, fk_version = _pyfastkron()
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    print(f"# kron_matmul on CPU: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores; numpy {np.__version__}, pyfastkron {fk_version}; "
          f"cases from {source}; seed {seed}")
    print("# M scaled for this machine (x <= ~2^24 elements): " + ", ".join(
        f"{c['name']}: M={c['M']}" + (f" [{c['note']}]" if c["note"] else "")
        for c in cases if c["note"]))
    print(f"# OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    rows = []
    for dtype in args.dtypes:
        for case in cases:
            row = run_case(case, dtype, rng, fk)
            rows.append(row)
            print(f"  {dtype} {case['set']:10s} {case['name']:16s} M={case['M']:4d} ours {row['ms_ours']:9.3f} ms"
                  f"  pyfastkron {_fmt(row['ms_pyfastkron'], '9.3f')} ms"
                  f"  shuffle {row['ms_shuffle']:9.3f} ms", file=sys.stderr, flush=True)
    print()
    print(table(rows))
    print()
    print(summary(rows))
    bad = [r for r in rows if max(r["err_vs_shuffle"], r.get("err_vs_pyfastkron") or 0.0)
           > (1e-4 if r["dtype"] == "float32" else 1e-10)]
    for r in bad:
        print(f"WARNING: {r['dtype']} {r['case']}: results disagree "
              f"(vs shuffle {r['err_vs_shuffle']:.1e}, "
              f"vs pyfastkron {r.get('err_vs_pyfastkron')})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"seed": seed, "cases_source": source, "pyfastkron": fk_version,
                       "cpu_count": os.cpu_count(), "rows": rows}, fh, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
