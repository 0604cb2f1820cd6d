"""One-call latency of kron_matmul on the GPU: single synchronised calls (the call, then a
stream synchronisation, timed on the host), ours (auto) against the shuffle algorithm through
the same library, on the shared kron_small set, float32 and float64 — what a caller who needs
the result now waits for (issue 35's latency item).

    python benchmarks/kron_latency.py [--lib cupy|torch] [--reps 200] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from kron_gpu_compare import shapes_of  # noqa: E402  (the shared sets' case reader)

CASES = os.path.join(_HERE, "..", "..", "shared", "bench", "cases.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="cupy", choices=("cupy", "torch"))
    ap.add_argument("--reps", type=int, default=200)
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
    cases = json.load(open(path))["kron_small"]["cases"]
    rng = np.random.default_rng(0)
    rows = []

    def once(fn):
        ts = []
        for _ in range(args.reps):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e6

    for case in cases:
        m, shapes, _ = shapes_of("kron_small", case)
        k = int(np.prod([p for p, _ in shapes]))
        for dt in ("float32", "float64"):
            x = conv(rng.standard_normal((m, k)).astype(dt))
            fs = [conv(rng.standard_normal(s).astype(dt)) for s in shapes]
            for _ in range(20):
                kronlinalg.kron_matmul(x, fs)
                kronlinalg.kron_matmul(x, fs, algorithm="shuffle")
            ours = once(lambda: kronlinalg.kron_matmul(x, fs))
            shuffle = once(lambda: kronlinalg.kron_matmul(x, fs, algorithm="shuffle"))
            ref = kronlinalg.kron_matmul(x, fs, algorithm="shuffle")
            got = kronlinalg.kron_matmul(x, fs)
            err = float(abs(got - ref).max() / abs(ref).max())
            label = f"{m} x " + " ".join(f"{p}x{q}" for p, q in shapes)
            rows.append({"case": label, "dtype": dt, "lib": args.lib, "ours_us": ours,
                         "shuffle_us": shuffle, "speedup": shuffle / ours, "maxrelerr": err})
            print(f"{label:30s} {dt:8s} ours {ours:7.1f} us  shuffle {shuffle:7.1f} us  "
                  f"{shuffle / ours:5.2f}x  err {err:.1e}", flush=True)
    for dt in ("float32", "float64"):
        sp = [r["speedup"] for r in rows if r["dtype"] == dt]
        print(f"median speed-up {dt}: {statistics.median(sp):.2f}x (min {min(sp):.2f}x)")
    if args.out:
        with open(os.path.join(args.out, f"kron_latency_{args.lib}.json"), "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
