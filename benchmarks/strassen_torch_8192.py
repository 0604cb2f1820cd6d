"""strassen_cublas on CUDA torch tensors (float64, N = 8192 and 16384) against torch.matmul in
the same process, at the levels asked (1, 2, or auto: the planner's pick): CUDA events around
single synchronised calls, warm, the median of interleaved rounds; --cupy: CuPy views of the
same data against cupy.matmul, interleaved too.

    python benchmarks/strassen_torch_8192.py [--sizes 8192,16384] [--rounds 7] [--levels 1,2,auto] [--cupy]
"""

import argparse
import statistics

import torch

import kronlinalg

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="8192,16384")
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--cupy", action="store_true", help="also CuPy views of the same data, interleaved")
ap.add_argument("--levels", default="1", help="comma list of 1..4 or auto")
ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
ap.add_argument("--queued", type=int, default=1,
                help="calls back to back between the events (per call; 1: single synchronised "
                     "calls, whose GPU starts each from idle clocks)")
args = ap.parse_args()


def timed(fn):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(args.queued):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / args.queued


def variant(a, b, lv):
    if lv == "auto":
        return lambda: kronlinalg.strassen_matmul(a, b)
    return lambda: kronlinalg.strassen_matmul(a, b, levels=int(lv), algorithm="strassen_cublas")


levels = args.levels.split(",")
for n in (int(v) for v in args.sizes.split(",")):
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, dtype=getattr(torch, args.dtype), device="cuda", generator=g)
    b = torch.randn(n, n, dtype=getattr(torch, args.dtype), device="cuda", generator=g)
    libs = {"torch": lambda: torch.matmul(a, b)}
    ours = {("torch", lv): variant(a, b, lv) for lv in levels}
    if args.cupy:
        import cupy

        ca, cb = cupy.from_dlpack(a), cupy.from_dlpack(b)
        libs["cupy"] = lambda: cupy.matmul(ca, cb)
        ours.update({("cupy", lv): variant(ca, cb, lv) for lv in levels})
    ref = libs["torch"]()
    for key, fn in ours.items():
        out = fn()
        out = torch.from_dlpack(out) if key[0] == "cupy" else out
        err = float((out - ref).abs().max() / ref.abs().max())
        print(f"  N={n} {key[0]} levels={key[1]}: max rel. diff from torch.matmul {err:.1e}")
    del ref, out
    for fn in list(libs.values()) + list(ours.values()):
        fn()
    t = {k: [] for k in list(libs) + list(ours)}
    for _ in range(args.rounds):  # interleaved: clock drift hits every variant alike
        for lib, fn in libs.items():
            t[lib].append(timed(fn))
            for key, f in ours.items():
                if key[0] == lib:
                    t[key].append(timed(f))
    for lib in libs:
        ml = statistics.median(t[lib])
        for key in ours:
            if key[0] != lib:
                continue
            mo = statistics.median(t[key])
            rounds = [round(x / y, 3) for x, y in zip(t[lib], t[key])]
            print(f"{lib} {args.dtype} N={n} queued {args.queued}: {lib}.matmul {ml:.2f} ms, strassen_matmul "
                  f"levels={key[1]} {mo:.2f} ms, ratio {ml / mo:.3f}x (rounds {rounds})")
