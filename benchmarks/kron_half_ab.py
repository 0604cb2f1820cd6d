"""The half types' kron_matmul plans side by side against our float32, in one process, on the
kron_large cases (issue 35: float16 / bfloat16 >= 1.8x our float32 time, median over P >= 16;
none slower; relative error <= 1e-2 against float64).

    python benchmarks/kron_half_ab.py [--variants old,ring,ring64] [--rounds 2] [--only ...]
        [--json PATH] [--md PATH]

Each variant is a set of planner knobs (read when a plan is made; kron_cuda.tune() drops the
plans and layouts made under the others), so the variants of one case run back to back on the
same GPU state: float32 under the defaults, then each half type under each variant.  A round
times every case; later rounds reverse the variants' order; a row's time is the median of its
rounds' medians (each kron_gpu_compare.run_case: CUDA events, warm, median of 10).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

from kron_gpu_compare import load_cases, load_roof, run_case, shapes_of  # noqa: E402

KNOBS = ("KRONLINALG_KRON_NATURAL_RING_HALF", "KRONLINALG_KRON_NATURAL_RING_TI",
         "KRONLINALG_KRON_NATURAL_T")
VARIANTS = {
    # the plans before the half types' ring kernel
    "old": {"KRONLINALG_KRON_NATURAL_RING_HALF": "0"},
    # the ring where no other tile fits (3-step P = 32 lines, 3-step P = 16 columns)
    "ring": {"KRONLINALG_KRON_NATURAL_RING_HALF": "1"},
    # and P = 32 column groups on the ring, tiles of 64 i (or 32)
    "ring64": {"KRONLINALG_KRON_NATURAL_RING_HALF": "2"},
    "ring32": {"KRONLINALG_KRON_NATURAL_RING_HALF": "2", "KRONLINALG_KRON_NATURAL_RING_TI": "32"},
    # and P = 16 column groups on the ring too (64 i)
    "ring64p16": {"KRONLINALG_KRON_NATURAL_RING_HALF": "3"},
    # line tiles of 4 lines (P = 16 groups: 32 KB, float32's bytes a tile; the half types' 2
    # lines hold half the bytes in flight that float32's do); for P = 16 cases only (every
    # line pass takes it: P = 32's 8 lines would drop to 4)
    "t4": {"KRONLINALG_KRON_NATURAL_RING_HALF": "1", "KRONLINALG_KRON_NATURAL_T": "4"},
    "p16t4": {"KRONLINALG_KRON_NATURAL_RING_HALF": "3", "KRONLINALG_KRON_NATURAL_T": "4"},
}
HALVES = ("float16", "bfloat16")


def set_knobs(kron_cuda, env):
    for k in KNOBS:
        os.environ.pop(k, None)
    os.environ.update(env)
    kron_cuda.tune()


def plan_of(row):
    """'kernel(L) kernel(L) ...' of a row's plan."""
    return " ".join(f"{k.split('.', 2)[-1]}({L})" for k, L in
                    re.findall(r"kernel=(\S+) L=(\d+)", row.get("plan", "")))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=os.path.join(_HERE, "data", "cases.json"))
    ap.add_argument("--anchors", default=os.path.join(_HERE, "data",
                                                      "h100-anchors-2026-11-22.json"))
    ap.add_argument("--variants", default="old,ring,ring64")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--only", default="")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    args = ap.parse_args(argv)
    run_args = argparse.Namespace(reps=max(10, args.reps), sweep=False, no_shuffle=True)

    import kronlinalg as kl
    from kronlinalg.testing import extension

    kron_cuda = extension("kron_cuda")
    if kron_cuda is None:
        sys.exit("kronlinalg was built without CUDA")
    cases = load_cases(args.cases)["kron_large"]
    roof = load_roof(args.anchors)
    only = set(filter(None, args.only.split(",")))
    variants = [v for v in args.variants.split(",") if v]
    halves = [d for d in args.dtypes.split(",") if d in HALVES]
    rows = {}  # (case, dtype, variant) -> [row of each round]
    print(f"{'case':<12}{'dtype':<10}{'variant':<8}{'ms':>9}{'relerr':>10}  plan", flush=True)
    for rnd in range(args.rounds):
        order = variants if rnd % 2 == 0 else variants[::-1]
        for case in cases:
            label = shapes_of("kron_large", case)[2]
            if only and label not in only:
                continue
            runs = [("float32", "default", {})] + [(d, v, VARIANTS[v]) for v in order
                                                   for d in halves]
            for dtype, var, env in runs:
                set_knobs(kron_cuda, env)
                try:
                    r = run_case("kron_large", case, dtype, run_args, roof, kl, kron_cuda)
                except Exception as err:  # noqa: BLE001 - one failing case must not end the run
                    r = {"case": label, "dtype": dtype,
                         "error": f"{type(err).__name__}: {str(err)[:160]}"}
                    print(f"{label:<12}{dtype:<10}{var:<8} ERROR {r['error']}", flush=True)
                    kron_cuda.tune()
                    continue
                finally:
                    set_knobs(kron_cuda, {})
                r["variant"] = var
                rows.setdefault((label, dtype, var), []).append(r)
                print(f"{label:<12}{dtype:<10}{var:<8}{r['ms']:>9.3f}{r['relerr']:>10.1e}  "
                      f"{plan_of(r)}{'' if r['ok'] else '  WRONG'}", flush=True)

    def ms(label, dtype, var):
        rs = rows.get((label, dtype, var))
        return statistics.median(r["ms"] for r in rs) if rs else None

    labels = []
    for case in cases:
        label = shapes_of("kron_large", case)[2]
        if any(k[0] == label for k in rows):
            labels.append((label, case[1]))
    summary = {}
    for d in halves:
        for v in variants:
            ratios = {lab: ms(lab, "float32", "default") / ms(lab, d, v) for lab, _ in labels
                      if ms(lab, "float32", "default") and ms(lab, d, v)}
            big = [r for lab, p in labels for r in [ratios.get(lab)] if r and p >= 16]
            errs = [r["relerr"] for (lab, dd, vv), rs in rows.items() if dd == d and vv == v
                    for r in rs]
            summary[f"{d}.{v}"] = {
                "median_P>=16": statistics.median(big) if big else None,
                "min_P>=16": min(big) if big else None, "n_P>=16": len(big),
                "min_all": min(ratios.values()) if ratios else None,
                "max_relerr": max(errs) if errs else None}
    print()
    for k, s in summary.items():
        print(k, json.dumps({a: (round(b, 4) if isinstance(b, float) else b)
                             for a, b in s.items()}))
    if args.md:
        with open(args.md, "w") as f:
            cols = [f"{d} {v}" for d in halves for v in variants]
            f.write("| case | plan " + " / ".join(variants) + " (half) | float32 ms | "
                    + " | ".join(f"{c} ms (x f32)" for c in cols) + " |\n")
            f.write("| --- | --- | ---: | " + " | ".join("---:" for _ in cols) + " |\n")
            for lab, _ in labels:
                plans = " / ".join(plan_of(rows[(lab, halves[0], v)][0])
                                   if (lab, halves[0], v) in rows else "-" for v in variants)
                f32 = ms(lab, "float32", "default")
                cells = []
                for d in halves:
                    for v in variants:
                        t = ms(lab, d, v)
                        err = max((r["relerr"] for r in rows.get((lab, d, v), [])), default=None)
                        cells.append(f"{t:.3f} ({f32 / t:.2f}x, err {err:.1e})" if t and f32
                                     else "-")
                f.write(f"| {lab} | {plans} | {f32:.3f} | " + " | ".join(cells) + " |\n"
                        if f32 else f"| {lab} | {plans} | - | " + " | ".join(cells) + " |\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "variants": {v: VARIANTS[v] for v in variants},
                       "rows": [r for rs in rows.values() for r in rs],
                       "command": " ".join(sys.argv)}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
