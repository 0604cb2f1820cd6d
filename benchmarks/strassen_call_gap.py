"""Where a single strassen_cublas call spends the time its per-launch table does not show: for
CuPy and torch float64 operands, one call timed (a) with CUDA events around it from an idle
device (what the A/B tables report), (b) on the host alone (perf_counter, no synchronisation),
(c) queued (K calls back to back between events, per call), against (d) the sum of the
per-launch table (events between launches: the allocations and the call's Python before the
first launch left out) and the library's matmul timed the same ways.

    python benchmarks/strassen_call_gap.py [--sizes 8192:1,16384:2] [--reps 5] [--queued 4]
"""

import argparse
import statistics
import time

import cupy as cp
import torch

import kronlinalg
from kronlinalg import strassen

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="8192:1,16384:2")
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--queued", type=int, default=4)
args = ap.parse_args()


def events(fn, k=1):
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    cp.cuda.Device().synchronize()
    start.record()
    for _ in range(k):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / k


def host(fn):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    fn()
    t = time.perf_counter() - t
    cp.cuda.Device().synchronize()
    return t * 1e3


def med(f, fn, *a):
    return statistics.median(f(fn, *a) for _ in range(args.reps))


for spec in args.sizes.split(","):
    n, L = (int(v) for v in spec.split(":"))
    ca, cb = (cp.random.default_rng(s).standard_normal((n, n)) for s in (1, 2))
    ta, tb = torch.from_dlpack(ca), torch.from_dlpack(cb)
    variants = {
        "cupy.matmul": lambda: cp.matmul(ca, cb),
        f"ours cupy L{L}": lambda: kronlinalg.strassen_matmul(ca, cb, levels=L,
                                                             algorithm="strassen_cublas"),
        "torch.matmul": lambda: torch.matmul(ta, tb),
        f"ours torch L{L}": lambda: kronlinalg.strassen_matmul(ta, tb, levels=L,
                                                              algorithm="strassen_cublas"),
        "3 cupy.empty (host)": lambda: [cp.empty((n, n)) for _ in range(3)],
    }
    for fn in variants.values():
        fn(), fn()
    print(f"N = {n}, levels {L}: ms (median of {args.reps})")
    print("| variant | single (events) | host only | queued x%d |" % args.queued)
    for name, fn in variants.items():
        print(f"| {name} | {med(events, fn):.3f} | {med(host, fn):.3f} | "
              f"{med(events, fn, args.queued):.3f} |")
    rows = strassen.stage_times(ca, cb, levels=L, algorithm="strassen_cublas", repeats=3)
    print(f"| per-launch table (sum) | {sum(r[1] for r in rows) * 1e3:.3f} | | |")
    pool = cp.get_default_memory_pool()
    print(f"cupy pool: used {pool.used_bytes() / 2**30:.2f} GiB, held {pool.total_bytes() / 2**30:.2f} GiB")
