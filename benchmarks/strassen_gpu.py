"""strassen_matmul on one GPU against cuBLAS (cupy.matmul, torch.matmul), in one run.

    python benchmarks/strassen_gpu.py --out strassen.json [--budget 150]

Everything is timed with CUDA events on warm inputs, median of >= 10 runs.  Sections (each
skipped once the time budget is spent, the JSON written after every one):

1. leaf kernel vs cuBLAS: strassen_matmul(levels=0, algorithm="strassen") (the multi-target leaf
   kernel, one target) against cupy.matmul at 2048..8192;
2. the issue's cases (FP64 N = 4096, 8192, 16384; FP32 N = 16384): cuBLAS (CuPy and torch),
   "strassen" and "strassen_cublas" at levels 1..3, default and overwrite mode, with the max
   error against cuBLAS's result and the planner's prediction;
3. per-stage CUDA-event timing (passes, product groups, strips), predicted beside measured;
4. overwrite mode's memory: pool bytes and device free memory before and after;
5. error growth per level (FP32 N = 1024, max-norm error relative to cuBLAS's, against a float64
   reference).
Prints markdown tables; the JSON holds every number.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import kronlinalg
from kronlinalg import strassen

try:
    import cupy as cp
except ImportError:  # pragma: no cover
    raise SystemExit("strassen_gpu.py needs CuPy")
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

START = time.time()


def cuda_time(fn, reps=10, warm=2):
    """Median seconds of fn() over reps runs (CUDA events on CuPy's current stream)."""
    for _ in range(warm):
        fn()
    stream = cp.cuda.get_current_stream()
    times = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(stream)
        fn()
        e1.record(stream)
        e1.synchronize()
        times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
    return float(np.median(times))


def torch_time(fn, reps=10, warm=2):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e-3)
    return float(np.median(times))


def rand(n, m, dtype, seed):
    return cp.random.default_rng(seed).standard_normal((n, m), dtype=np.float64).astype(dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="strassen.json")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds for the whole run")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    res = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "leaf": [], "cases": [], "stages": [], "memory": [], "error_growth": []}

    def save():
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    def left():
        return args.budget - (time.time() - START)

    # 5. error growth (cheap, first)
    n = 1024
    a, b = rand(n, n, np.float32, 1), rand(n, n, np.float32, 2)
    ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
    base = float(np.abs(cp.asnumpy(a @ b) - ref).max())
    for L in range(5):
        err = float(np.abs(cp.asnumpy(strassen.strassen_matmul(a, b, levels=L,
                                                               algorithm="strassen")) - ref).max())
        res["error_growth"].append({"levels": L, "err": err, "vs_cublas": err / base})
    print("error growth (FP32 N=1024, max-norm error / cuBLAS's):",
          ", ".join(f"L{r['levels']} {r['vs_cublas']:.2f}" for r in res["error_growth"]))
    save()

    # 1. leaf kernel vs cuBLAS
    print("\n| leaf | dtype | N | kernel ms | cuBLAS ms | kernel / cuBLAS speed |")
    print("|---|---|---|---|---|---|")
    for dtype in (np.float64, np.float32):
        for n in (2048, 4096, 8192):
            if left() < 0.75 * args.budget:  # the leaf section takes at most a quarter
                break
            a, b = rand(n, n, dtype, 3), rand(n, n, dtype, 4)
            tk = cuda_time(lambda: strassen.strassen_matmul(a, b, levels=0,
                                                            algorithm="strassen"), args.reps)
            tc = cuda_time(lambda: a @ b, args.reps)
            res["leaf"].append({"dtype": np.dtype(dtype).name, "N": n, "kernel_s": tk,
                                "cublas_s": tc, "ratio": tc / tk})
            print(f"| leaf | {np.dtype(dtype).name} | {n} | {tk * 1e3:.2f} | {tc * 1e3:.2f} | "
                  f"{tc / tk:.3f} |", flush=True)
            del a, b
    save()

    # 2. the issue's cases
    print("\n| dtype | N | algorithm | levels | mode | ms | vs cupy.matmul | vs torch.matmul | "
          "predicted ms | max err / cuBLAS err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cases = [(np.float64, 4096), (np.float64, 8192), (np.float64, 12288), (np.float64, 16384),
             (np.float32, 16384)]
    for dtype, n in cases:
        if left() < 0.25 * args.budget:
            break
        name = np.dtype(dtype).name
        a, b = rand(n, n, dtype, 5), rand(n, n, dtype, 6)
        t_cp = cuda_time(lambda: a @ b, args.reps)
        t_th = float("nan")
        if torch is not None:
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            t_th = torch_time(lambda: ta @ tb, args.reps)
            del ta, tb
        ref = a @ b
        row0 = {"dtype": name, "N": n, "cupy_s": t_cp, "torch_s": t_th,
                "tflops_cublas": 2.0 * n ** 3 / t_cp / 1e12}
        print(f"| {name} | {n} | cuBLAS (cupy) | 0 | - | {t_cp * 1e3:.2f} | 1.000 | "
              f"{t_th / t_cp:.3f} | - | - |", flush=True)
        for algo in ("strassen", "strassen_cublas", "strassen_reloaded"):
            for L in (1, 2, 3):
                for ow in (False, True):
                    if algo != "strassen" and ow:
                        continue
                    if algo == "strassen_reloaded" and (L > 1 or name != "float64"):
                        continue
                    if left() < 0.2 * args.budget:
                        break
                    try:
                        t = cuda_time(lambda: strassen.strassen_matmul(
                            a, b, levels=L, overwrite_inputs=ow, algorithm=algo), args.reps)
                        out = strassen.strassen_matmul(a, b, levels=L, algorithm=algo)
                        err = float(cp.abs(out - ref).max())
                        del out
                    except Exception as exc:  # report and go on: one failure must not end the run
                        print(f"| {name} | {n} | {algo} | {L} | {ow} | failed: {exc} |")
                        continue
                    pred = kronlinalg.plan("strassen_matmul", (n, n), (n, n), dtype=name,
                                           device=a, algorithm=algo, levels=L, overwrite=ow)[0]
                    row = {**row0, "algorithm": algo, "levels": L, "overwrite": ow, "s": t,
                           "vs_cupy": t_cp / t, "vs_torch": t_th / t,
                           "predicted_s": pred.details.get("model_s", pred.seconds),
                           "max_abs_diff_vs_cublas": err}
                    res["cases"].append(row)
                    print(f"| {name} | {n} | {algo} | {L} | {'overwrite' if ow else 'default'} | "
                          f"{t * 1e3:.2f} | {t_cp / t:.3f} | {t_th / t:.3f} | "
                          f"{row['predicted_s'] * 1e3:.2f} | {err:.2e} |", flush=True)
        # what the planner picks (levels=None, algorithm="auto") and what it measures
        pick = kronlinalg.plan("strassen_matmul", (n, n), (n, n), dtype=name, device=a,
                               levels=None, overwrite=False)[0]
        t_auto = cuda_time(lambda: strassen.strassen_matmul(a, b), args.reps)
        res["cases"].append({**row0, "algorithm": "auto", "pick": pick.name,
                             "levels": pick.details.get("levels"), "s": t_auto,
                             "vs_cupy": t_cp / t_auto})
        print(f"| {name} | {n} | auto -> {pick.name} | {pick.details.get('levels')} | default | "
              f"{t_auto * 1e3:.2f} | {t_cp / t_auto:.3f} | {t_th / t_auto:.3f} | "
              f"{pick.details.get('model_s', pick.seconds) * 1e3:.2f} | - |", flush=True)
        save()
        del a, b, ref
        cp.get_default_memory_pool().free_all_blocks()

    # 3. per-stage timing
    print("\n| algorithm (float64) | N | levels | stage | launches | measured ms | predicted ms "
          "| pred/meas |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (4096, 8192, 16384):
        a, b = rand(n, n, np.float64, 7), rand(n, n, np.float64, 8)
        for algo, L in (("strassen_cublas", 1), ("strassen_cublas", 2), ("strassen_cublas", 3),
                        ("strassen", 1), ("strassen", 2), ("strassen", 3),
                        ("strassen_reloaded", 1)):
            if left() < 0.1 * args.budget:
                break
            rows = strassen.stage_times(a, b, levels=L, algorithm=algo, repeats=args.reps)
            tot_m = sum(r[1] for r in rows)
            tot_p = sum(r[2] for r in rows)
            for lab, meas, pred, cnt in rows + [("total", tot_m, tot_p, 0)]:
                res["stages"].append({"N": n, "algorithm": algo, "levels": L, "stage": lab,
                                      "launches": cnt,
                                      "measured_s": meas, "predicted_s": pred})
                print(f"| {algo} | {n} | {L} | {lab} | {cnt} | {meas * 1e3:.3f} | "
                      f"{pred * 1e3:.3f} | {pred / meas if meas else float('nan'):.2f} |",
                      flush=True)
        save()
        del a, b
        cp.get_default_memory_pool().free_all_blocks()

    # 4. overwrite mode's memory
    if left() > 5:
        n = 8192
        a, b = rand(n, n, np.float64, 9), rand(n, n, np.float64, 10)
        c = cp.zeros((n, n), np.float64)
        strassen.strassen_matmul(a, b, c=c, beta=1.0, levels=2, overwrite_inputs=True)
        cp.cuda.Device().synchronize()
        pool = cp.get_default_memory_pool()
        used0, free0 = pool.used_bytes(), cp.cuda.runtime.memGetInfo()[0]
        total0 = pool.total_bytes()
        strassen.strassen_matmul(a, b, c=c, beta=1.0, levels=2, overwrite_inputs=True)
        cp.cuda.Device().synchronize()
        res["memory"].append({"N": n, "pool_used_delta": pool.used_bytes() - used0,
                              "pool_total_delta": pool.total_bytes() - total0,
                              "device_free_delta": cp.cuda.runtime.memGetInfo()[0] - free0})
        print("\noverwrite mode memory (N=8192 FP64, levels 2):", res["memory"][-1])
    save()
    print(f"\nwall {time.time() - START:.0f} s")


if __name__ == "__main__":
    main()
