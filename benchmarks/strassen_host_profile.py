"""cProfile of single synchronised strassen_cublas calls (float64, CuPy and torch operands):
where the host time of a call goes (the GPU idles until its first launch).

    python benchmarks/strassen_host_profile.py [--n 8192] [--levels 1] [--calls 10]
"""

import argparse
import cProfile
import io
import pstats

import cupy as cp
import torch

import kronlinalg

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=8192)
ap.add_argument("--levels", type=int, default=1)
ap.add_argument("--calls", type=int, default=10)
args = ap.parse_args()
ca, cb = (cp.random.default_rng(s).standard_normal((args.n, args.n)) for s in (1, 2))
ta, tb = torch.from_dlpack(ca), torch.from_dlpack(cb)
for name, (a, b) in {"cupy": (ca, cb), "torch": (ta, tb)}.items():
    call = lambda: kronlinalg.strassen_matmul(a, b, levels=args.levels, algorithm="strassen_cublas")
    call(), call()
    cp.cuda.Device().synchronize()
    prof = cProfile.Profile()
    for _ in range(args.calls):
        prof.enable()
        call()
        prof.disable()
        cp.cuda.Device().synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
    print(f"== {name}, N = {args.n}, levels {args.levels}, {args.calls} calls")
    print("\n".join(s.getvalue().splitlines()[:60]))
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
    print("\n".join(s.getvalue().splitlines()[:35]))

# Does the GPU run slower after idling?  cupy.matmul timed from an event recorded before a host
# sleep (the GPU idle for it): its time minus the sleep, against no sleep.
import statistics  # noqa: E402
import time  # noqa: E402


def after_idle(sleep_s, reps=5):
    out = []
    for _ in range(reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        cp.cuda.Device().synchronize()
        start.record()
        t = time.perf_counter()
        while time.perf_counter() - t < sleep_s:
            pass
        slept = time.perf_counter() - t
        cp.matmul(ca, cb)
        stop.record()
        stop.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, stop) - slept * 1e3)
    return statistics.median(out)


for s in (0.0, 0.0005, 0.001, 0.002, 0.005):
    print(f"cupy.matmul N = {args.n} after {s * 1e3:.1f} ms idle: {after_idle(s):.3f} ms "
          "(sleep subtracted)")
