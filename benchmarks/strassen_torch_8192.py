"""strassen_cublas at one level on CUDA torch tensors (float64, N = 8192 and 16384) against
torch.matmul in the same process: CUDA events around single synchronised calls, warm, the
median of interleaved rounds (what the CuPy table of docs/performance.md does for CuPy).

    python benchmarks/strassen_torch_8192.py [--sizes 8192,16384] [--rounds 7]
"""

import argparse
import statistics

import torch

import kronlinalg

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="8192,16384")
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--cupy", action="store_true", help="also CuPy views of the same data, interleaved")
args = ap.parse_args()


def timed(fn):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


for n in (int(v) for v in args.sizes.split(",")):
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, dtype=torch.float64, device="cuda", generator=g)
    b = torch.randn(n, n, dtype=torch.float64, device="cuda", generator=g)
    ours = lambda: kronlinalg.strassen_matmul(a, b, levels=1, algorithm="strassen_cublas")
    lib = lambda: torch.matmul(a, b)
    err = float((ours() - lib()).abs().max() / lib().abs().max())
    for _ in range(2):
        ours(), lib()
    t_ours, t_lib, t_cl, t_co = [], [], [], []
    if args.cupy:
        import cupy

        ca, cb = cupy.from_dlpack(a), cupy.from_dlpack(b)
        c_ours = lambda: kronlinalg.strassen_matmul(ca, cb, levels=1, algorithm="strassen_cublas")
        c_lib = lambda: cupy.matmul(ca, cb)
        c_ours(), c_lib()
    for _ in range(args.rounds):  # interleaved: clock drift hits both
        t_lib.append(timed(lib))
        t_ours.append(timed(ours))
        if args.cupy:
            t_cl.append(timed(c_lib))
            t_co.append(timed(c_ours))
    if args.cupy:
        print(f"  cupy float64 N={n}: cupy.matmul {statistics.median(t_cl):.2f} ms, ours "
              f"{statistics.median(t_co):.2f} ms, ratio "
              f"{statistics.median(t_cl) / statistics.median(t_co):.3f}x")
    mo, ml = statistics.median(t_ours), statistics.median(t_lib)
    print(f"torch float64 N={n}: torch.matmul {ml:.2f} ms, strassen_cublas L1 {mo:.2f} ms, "
          f"ratio {ml / mo:.3f}x (rounds {[round(ml_ / mo_, 3) for ml_, mo_ in zip(t_lib, t_ours)]}), "
          f"max rel. diff {err:.1e}")
