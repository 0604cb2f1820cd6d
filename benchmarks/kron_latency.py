"""One-call latency of kron_matmul on the GPU: single synchronised calls (the call, then a
stream synchronisation, timed on the host), ours (auto) against the shuffle algorithm through
the same library, float32 and float64 — what a caller who needs the result now waits for
(issue 35's latency item) — on the shared kron_small set and FastKron's 28 real-world sizes
(its Table 4 as kron_cpu_compare.py reads it: REAL_WORLD; x past 2^29 elements loses leading
factors, so 16 x 32^6 runs as 16 x 32^5).  Calls of over ~5 ms are repeated fewer times (at
least 5, about a second of calls).

    python benchmarks/kron_latency.py [--lib cupy|torch] [--sets kron_small,real_world]
        [--reps 200] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from kron_cpu_compare import REAL_WORLD, case_name  # noqa: E402  (FastKron's Table 4 sizes)
from kron_gpu_compare import shapes_of  # noqa: E402  (the shared sets' case reader)

CASES = os.path.join(_HERE, "..", "..", "shared", "bench", "cases.json")
X_LIMIT = 2**29  # elements of x on the GPU: past it, leading factors are dropped


def real_world_cases():
    """(set, M, shapes, note) of FastKron's 28 real-world sizes, within X_LIMIT."""
    out = []
    for m, spec in REAL_WORLD:
        shapes = [tuple(s) for s in spec]
        n0 = len(shapes)
        while len(shapes) > 1 and m * math.prod(p for p, _ in shapes) > X_LIMIT:
            shapes = shapes[1:]
        out.append(("real_world", m, shapes, f"N {n0}->{len(shapes)}" if len(shapes) < n0 else ""))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="cupy", choices=("cupy", "torch"))
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--sets", default="kron_small", help="kron_small,real_world")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import kronlinalg

    if args.lib == "cupy":
        import cupy as xp

        sync = xp.cuda.get_current_stream().synchronize
        conv = xp.asarray
    else:
        import torch as xp

        sync = xp.cuda.synchronize
        conv = lambda a: xp.as_tensor(a, device="cuda")  # noqa: E731
    path = CASES if os.path.exists(CASES) else os.path.join(_HERE, "data", "cases.json")
    sets = args.sets.split(",")
    dtypes = args.dtypes.split(",")
    cases = []
    if "kron_small" in sets:
        for case in json.load(open(path))["kron_small"]["cases"]:
            m, shapes, _ = shapes_of("kron_small", case)
            cases.append(("kron_small", m, shapes, ""))
    if "real_world" in sets:
        cases += real_world_cases()
    rng = np.random.default_rng(0)
    rows = []

    def timed(fn):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - t0

    def once(fn):
        # (about a second of calls for the slow ones, at least 5)
        reps = max(5, min(args.reps, int(1.0 / max(timed(fn), 1e-6))))
        return statistics.median(timed(fn) for _ in range(reps)) * 1e6

    for set_name, m, shapes, note in cases:
        k = int(np.prod([p for p, _ in shapes]))
        for dt in dtypes:
            x = conv(rng.standard_normal((m, k)).astype(dt))
            fs = [conv(rng.standard_normal(s).astype(dt)) for s in shapes]
            warm = 20 if m * k < 2**22 else 2
            for _ in range(warm):
                kronlinalg.kron_matmul(x, fs)
                kronlinalg.kron_matmul(x, fs, algorithm="shuffle")
            ours = once(lambda: kronlinalg.kron_matmul(x, fs))
            shuffle = once(lambda: kronlinalg.kron_matmul(x, fs, algorithm="shuffle"))
            ref = kronlinalg.kron_matmul(x, fs, algorithm="shuffle")
            got = kronlinalg.kron_matmul(x, fs)
            err = float(abs(got - ref).max() / abs(ref).max())
            del ref, got, x
            label = f"{m} x {case_name([list(s) for s in shapes])}"
            rows.append({"set": set_name, "case": label, "note": note, "dtype": dt,
                         "lib": args.lib, "ours_us": ours, "shuffle_us": shuffle,
                         "speedup": shuffle / ours, "maxrelerr": err})
            print(f"{set_name:10s} {label:24s} {dt:8s} ours {ours:9.1f} us  shuffle "
                  f"{shuffle:9.1f} us  {shuffle / ours:6.2f}x  err {err:.1e} {note}", flush=True)
    for set_name in sets:
        for dt in dtypes:
            sp = [r["speedup"] for r in rows if r["dtype"] == dt and r["set"] == set_name]
            if sp:
                print(f"{set_name} median speed-up {dt}: {statistics.median(sp):.2f}x "
                      f"(min {min(sp):.2f}x, n {len(sp)})")
    for dt in dtypes:
        sp = [r["speedup"] for r in rows if r["dtype"] == dt]
        print(f"all median speed-up {dt}: {statistics.median(sp):.2f}x (n {len(sp)})")
    if args.out:
        tag = "_".join(sets)
        with open(os.path.join(args.out, f"kron_latency_{args.lib}_{tag}.json"), "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
