"""strassen_matmul on one GPU against cuBLAS (cupy.matmul, torch.matmul), in one run.

    python benchmarks/strassen_gpu.py --out strassen.json [--budget 150] [--sections ...]

Everything is timed with CUDA events on warm inputs, median of >= `--reps` runs.  Sections (each
skipped once its share of the time budget is spent, the JSON written after every one):

focus   the one-level forms of strassen_cublas side by side with cuBLAS, interleaved in
        rounds (cupy.matmul, Winograd's form - its sums pass on the main stream or beside the
        first product on a second one -, the sums form, the planner's pick) at FP64
        N = 8192, 16384, 12288, 4096: the ratio of medians and each round's ratios;
error   error growth per level (FP32 N = 1024, max-norm error relative to cuBLAS's, against a
        float64 reference);
leaf    the leaf kernel vs cuBLAS: strassen_matmul(levels=0, algorithm="strassen") (the FP64 leaf
        is the CUTLASS mainloop where built, KRONLINALG_STRASSEN_LEAF picks) against cupy.matmul
        at 2048..8192;
cases   the `strassen` case set of ../shared/bench/cases.json (orders 2048..16384, float64 and
        float32, plus non-square, odd and alpha/beta cases): cuBLAS against what the planner
        picks (levels=None) - the no-regression check: a pick other than classical that measures
        > 2 % slower is flagged REGRESSION - and, at the issue's orders, "strassen" and
        "strassen_cublas" at levels 1..3 with the max error against cuBLAS's result and the
        planner's prediction;
stages  per-stage CUDA-event timing (passes, product groups, strips), predicted beside measured,
        "strassen" and "strassen_cublas" at levels 1..3, N = 4096, 8192, 16384;
memory  overwrite mode's memory: pool bytes and device free memory before and after.
Prints markdown tables; the JSON holds every number (and the planner's device profile, so that
the predictions can be recomputed offline).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import kronlinalg
from kronlinalg import strassen
from kronlinalg.common import config

try:
    import cupy as cp
except ImportError:  # pragma: no cover
    raise SystemExit("strassen_gpu.py needs CuPy")
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

START = time.time()


def cuda_time(fn, reps=10, warm=2, inner=1):
    """Median seconds per call of fn() over reps runs of `inner` back-to-back calls between two
    CUDA events on CuPy's current stream (inner > 1: the GPU's time once its queue is full, the
    host's per-call overhead hidden, as for the leaf launches inside a Strassen schedule)."""
    for _ in range(warm):
        fn()
    stream = cp.cuda.get_current_stream()
    times = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(stream)
        for _ in range(inner):
            fn()
        e1.record(stream)
        e1.synchronize()
        times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3 / inner)
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


# the `strassen` case set of ../shared/bench/cases.json (the device run has no ../shared)
CASE_ORDERS = (2048, 4096, 8192, 12288, 16384)
CASE_DTYPES = (np.float64, np.float32)
# the issue's orders, where the algorithms and levels are swept: its targets first (with the
# planner's pick), then the rest of the case set (the pick only), then the orders it only reports
SWEEP_FIRST = [(np.float64, 16384), (np.float64, 8192), (np.float32, 16384)]
SWEEP_LATE = [(np.float64, 12288), (np.float64, 4096)]


def section_error(res):
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


def _form(value):
    """Sets the knob that picks strassen_cublas's one-level form ("1" Winograd, "0" sums)."""
    os.environ["KRONLINALG_STRASSEN_WINOGRAD"] = value


FOCUS = ((np.float64, 8192, 5), (np.float64, 16384, 2), (np.float64, 12288, 2),
         (np.float64, 4096, 3))


def section_focus(res, args, left):
    print("\n| focus | dtype | N | variant | median ms | cupy / variant (medians) | "
          "per round min - max | max diff vs cupy |")
    print("|---|---|---|---|---|---|---|---|")
    for dtype, n, rounds in FOCUS:
        if left() < 0:
            print("(focus: out of time)")
            return
        name = np.dtype(dtype).name
        a, b = rand(n, n, dtype, 5), rand(n, n, dtype, 6)
        ref = a @ b

        def cublas_form(value):
            def run():
                _form(value)
                return strassen.strassen_matmul(a, b, levels=1, algorithm="strassen_cublas")
            return run

        def auto():
            _form("1")
            return strassen.strassen_matmul(a, b)

        variants = [("cuBLAS (cupy)", lambda: a @ b),
                    ("strassen_cublas L1 winograd", cublas_form("1")),
                    ("strassen_cublas L1 winograd, sums beside P1", cublas_form("2")),
                    ("strassen_cublas L1 sums", cublas_form("0")), ("auto", auto)]
        diffs = {}
        for v, fn in list(variants):
            try:
                diffs[v] = float(cp.abs(fn() - ref).max())
            except Exception as exc:  # report and go on: one failure must not end the run
                print(f"| focus | {name} | {n} | {v} | failed: {exc} |", flush=True)
                variants.remove((v, fn))
        times = {v: [] for v, _ in variants}
        for _ in range(rounds):
            for v, fn in variants:
                times[v].append(cuda_time(fn, args.reps, warm=1))
        _form("1")
        pick = kronlinalg.plan("strassen_matmul", (n, n), (n, n), dtype=name, device=a,
                               levels=None, overwrite=False)[0]
        base = float(np.median(times["cuBLAS (cupy)"]))
        for v, _ in variants:
            med = float(np.median(times[v]))
            per = [c / t for c, t in zip(times["cuBLAS (cupy)"], times[v])]
            label = v + (f" -> {pick.name} L{pick.details.get('levels')}" if v == "auto" else "")
            res["focus"].append({"dtype": name, "N": n, "variant": label, "s": med,
                                 "rounds_s": times[v], "vs_cupy": base / med,
                                 "vs_cupy_rounds": per, "max_abs_diff": diffs[v]})
            print(f"| focus | {name} | {n} | {label} | {med * 1e3:.3f} | {base / med:.4f} | "
                  f"{min(per):.4f} - {max(per):.4f} | {diffs[v]:.1e} |", flush=True)
        del a, b, ref
        cp.get_default_memory_pool().free_all_blocks()


def section_leaf(res, args, left):
    print("\n| leaf | dtype | N | kernel ms | cuBLAS ms | kernel / cuBLAS speed | queued: kernel "
          "ms | cuBLAS ms | speed | the leaf launch alone (events around it): ms, queued cuBLAS / "
          "it |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dtype in [np.dtype(d).type for d in args.leaf_dtypes.split(",")]:
        for n in [int(x) for x in args.leaf_sizes.split(",")]:
            if left() < 0:
                return
            a, b = rand(n, n, dtype, 3), rand(n, n, dtype, 4)
            tk = cuda_time(lambda: strassen.strassen_matmul(a, b, levels=0,
                                                            algorithm="strassen"), args.reps)
            tc = cuda_time(lambda: a @ b, args.reps)
            err = float(cp.abs(strassen.strassen_matmul(a, b, levels=0, algorithm="strassen")
                               - a @ b).max())
            # back to back (the host's per-call overhead hidden on both sides)
            queued = dict(reps=5, warm=1, inner=8)
            qk = cuda_time(lambda: strassen.strassen_matmul(a, b, levels=0, algorithm="strassen"),
                           **queued)
            qc = cuda_time(lambda: a @ b, **queued)
            # the leaf launch alone, between events recorded just before and after it
            ev = [r for r in strassen.stage_times(a, b, levels=0, algorithm="strassen",
                                                  repeats=args.reps) if r[0] == "leaf"]
            tl = ev[0][1] if ev else float("nan")
            res["leaf"].append({"dtype": np.dtype(dtype).name, "N": n, "kernel_s": tk,
                                "cublas_s": tc, "ratio": tc / tk, "max_abs_diff": err,
                                "queued_kernel_s": qk, "queued_cublas_s": qc,
                                "queued_ratio": qc / qk, "launch_s": tl,
                                "queued_cublas_vs_launch": qc / tl,
                                "leaf_choice": config.get("KRONLINALG_STRASSEN_LEAF")})
            print(f"| leaf | {np.dtype(dtype).name} | {n} | {tk * 1e3:.3f} | {tc * 1e3:.3f} | "
                  f"{tc / tk:.3f} | {qk * 1e3:.3f} | {qc * 1e3:.3f} | {qc / qk:.3f} | launch "
                  f"alone {tl * 1e3:.3f} ms: {qc / tl:.3f} |  (max diff "
                  f"{err:.1e}, KRONLINALG_STRASSEN_LEAF={config.get('KRONLINALG_STRASSEN_LEAF')})",
                  flush=True)
            del a, b


def _cublas_gemm(a, b, c, alpha, beta):
    """alpha a @ b + beta c by one cuBLAS call where CuPy exposes it (into a copy of c)."""
    out = c.copy()
    try:
        from cupy import cublas
        cublas.gemm("N", "N", a, b, out=out, alpha=alpha, beta=beta)
    except Exception:  # older CuPy: the expression
        out = alpha * (a @ b) + beta * c
    return out


def section_cases(res, args, left):
    print("\n| dtype | shape | algorithm | levels | mode | ms | vs cupy.matmul | vs torch.matmul | "
          "predicted ms | max err / check |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rest = [(dt, n) for n in CASE_ORDERS for dt in CASE_DTYPES if (dt, n) not in SWEEP_FIRST]
    # (dtype, (m, k, n), (alpha, beta) or None, the planner's pick, the sweep)
    cases = [(dt, (n, n, n), None, True, True) for dt, n in SWEEP_FIRST]
    cases += [(dt, (n, n, n), None, True, False) for dt, n in rest]
    cases += [(np.float64, (8191, 8191, 8191), None, True, False),
              (np.float64, (12000, 9000, 10000), None, True, False),
              (np.float64, (16384, 16384, 16384), (0.7, -0.3), True, False),
              (np.float32, (12000, 9000, 10000), None, True, False)]
    cases += [(dt, (n, n, n), None, False, True) for dt, n in SWEEP_LATE]
    for dtype, (m, k, n), ab, with_pick, sweep in cases:
        if left() < 0:
            print("(cases: out of time)")
            return
        name = np.dtype(dtype).name
        shape = f"{m}x{k}x{n}" + (f" a={ab[0]} b={ab[1]}" if ab else "")
        a, b = rand(m, k, dtype, 5), rand(k, n, dtype, 6)
        c = rand(m, n, dtype, 11) if ab else None
        if ab:
            peer = lambda: _cublas_gemm(a, b, c, ab[0], ab[1])  # noqa: E731
        else:
            peer = lambda: a @ b  # noqa: E731
        t_cp = cuda_time(peer, args.reps)
        t_th = float("nan")
        if torch is not None and sweep:
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            t_th = torch_time(lambda: ta @ tb, args.reps)
            del ta, tb
        row0 = {"dtype": name, "m": m, "k": k, "n": n, "N": n, "alpha_beta": ab, "cupy_s": t_cp,
                "torch_s": t_th, "tflops_cublas": 2.0 * m * n * k / t_cp / 1e12}
        print(f"| {name} | {shape} | cuBLAS (cupy) | 0 | - | {t_cp * 1e3:.2f} | 1.000 | "
              f"{t_th / t_cp:.3f} | - | - |", flush=True)
        # the planner's pick (levels=None) and what it measures: the no-regression check
        kw = {"c": c, "alpha": ab[0], "beta": ab[1]} if ab else {}
        if with_pick:
            pick = kronlinalg.plan("strassen_matmul", (m, k), (k, n), dtype=name, device=a,
                                   levels=None, overwrite=False)[0]
            try:
                t_auto = cuda_time(lambda: strassen.strassen_matmul(a, b, **kw), args.reps)
            except Exception as exc:  # report and go on
                print(f"| {name} | {shape} | auto -> {pick.name} | failed: {exc} |", flush=True)
                continue
            slower = pick.name != "classical" and t_auto > 1.02 * t_cp
            pred = pick.details.get("model_s", pick.seconds)
            res["cases"].append({**row0, "algorithm": "auto", "pick": pick.name,
                                 "levels": pick.details.get("levels"), "s": t_auto,
                                 "vs_cupy": t_cp / t_auto, "predicted_s": pred,
                                 "regression": slower})
            print(f"| {name} | {shape} | auto -> {pick.name} | {pick.details.get('levels')} | "
                  f"default | {t_auto * 1e3:.2f} | {t_cp / t_auto:.3f} | - | {pred * 1e3:.2f} | "
                  f"{'REGRESSION' if slower else 'ok'} |", flush=True)
        if sweep and args.sweep:
            ref = a @ b
            for algo, L, ow in (("strassen", 1, False), ("strassen", 1, True),
                                ("strassen", 2, False), ("strassen", 3, False),
                                ("strassen_cublas", 1, False), ("strassen_cublas", 2, False)):
                if left() < 0:
                    break
                try:
                    t = cuda_time(lambda: strassen.strassen_matmul(
                        a, b, levels=L, overwrite_inputs=ow, algorithm=algo), args.reps)
                    out = strassen.strassen_matmul(a, b, levels=L, algorithm=algo)
                    err = float(cp.abs(out - ref).max())
                    del out
                except Exception as exc:  # report and go on: one failure must not end the run
                    print(f"| {name} | {shape} | {algo} | {L} | {ow} | failed: {exc} |")
                    continue
                pred = kronlinalg.plan("strassen_matmul", (n, n), (n, n), dtype=name,
                                       device=a, algorithm=algo, levels=L, overwrite=ow)[0]
                row = {**row0, "algorithm": algo, "levels": L, "overwrite": ow, "s": t,
                       "vs_cupy": t_cp / t, "vs_torch": t_th / t,
                       "predicted_s": pred.details.get("model_s", pred.seconds),
                       "max_abs_diff_vs_cublas": err}
                res["cases"].append(row)
                print(f"| {name} | {shape} | {algo} | {L} | "
                      f"{'overwrite' if ow else 'default'} | {t * 1e3:.2f} | {t_cp / t:.3f} | "
                      f"{t_th / t:.3f} | {row['predicted_s'] * 1e3:.2f} | {err:.2e} |",
                      flush=True)
            del ref
        del a, b, c
        cp.get_default_memory_pool().free_all_blocks()


# the per-stage runs, most wanted first: strassen_cublas (one level in both forms: "w"
# Winograd's, "s" the sums form) at the issue's orders, then "strassen"
STAGE_RUNS = ([("strassen_cublas", 4096, L, f) for L, f in ((1, "1"), (1, "0"), (2, "1"),
                                                           (3, "1"))]
              + [("strassen_cublas", 8192, L, f) for L, f in ((1, "1"), (1, "0"), (2, "1"),
                                                             (3, "1"))]
              + [("strassen_cublas", 16384, L, f) for L, f in ((1, "1"), (1, "0"), (2, "1"),
                                                              (3, "1"))]
              + [("strassen", n, L, "1") for n in (4096, 8192, 16384) for L in (1, 2, 3)])


def section_stages(res, args, left):
    print("\n| algorithm (float64) | N | levels | stage | launches | measured ms | predicted ms "
          "| pred/meas |")
    print("|---|---|---|---|---|---|---|---|")
    arrays = {}
    for algo, n, L, form in STAGE_RUNS:
        if left() < 0:
            print("(stages: out of time)")
            break
        if n not in arrays:
            arrays.clear()
            cp.get_default_memory_pool().free_all_blocks()
            arrays[n] = (rand(n, n, np.float64, 7), rand(n, n, np.float64, 8))
        a, b = arrays[n]
        _form(form)
        tag = algo + ({"1": " (w)", "0": " (s)"}[form]
                      if algo == "strassen_cublas" and L == 1 else "")
        try:
            rows = strassen.stage_times(a, b, levels=L, algorithm=algo, repeats=args.reps)
        except Exception as exc:  # report and go on
            print(f"| {tag} | {n} | {L} | failed: {exc} |", flush=True)
            continue
        finally:
            _form("1")
        tot_m = sum(r[1] for r in rows)
        tot_p = sum(r[2] for r in rows)
        for lab, meas, pred, cnt in rows + [("total", tot_m, tot_p, 0)]:
            res["stages"].append({"N": n, "algorithm": tag, "levels": L, "stage": lab,
                                  "launches": cnt, "measured_s": meas, "predicted_s": pred})
            print(f"| {tag} | {n} | {L} | {lab} | {cnt} | {meas * 1e3:.3f} | "
                  f"{pred * 1e3:.3f} | {pred / meas if meas else float('nan'):.2f} |",
                  flush=True)
    arrays.clear()
    cp.get_default_memory_pool().free_all_blocks()


def section_memory(res):
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


# each section's share of the budget: it stops starting work once its share is spent
ORDER = ("focus", "cases", "stages", "leaf", "error", "memory")
SHARES = {"focus": 0.25, "cases": 0.3, "stages": 0.3, "leaf": 0.1, "error": 0.02,
          "memory": 0.03}


def main():
    import dataclasses

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="strassen.json")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds for the whole run")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sections", default=",".join(ORDER))
    ap.add_argument("--sweep", type=int, default=1,
                    help="0: the case set with the planner's picks only (no level sweeps)")
    ap.add_argument("--leaf-dtypes", default="float64,float32")
    ap.add_argument("--leaf-sizes", default="2048,4096,8192")
    args = ap.parse_args()
    sections = args.sections.split(",")
    res = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "leaf_choice": config.get("KRONLINALG_STRASSEN_LEAF"),
           "leaf": [], "cases": [], "stages": [], "memory": [], "error_growth": [],
           "focus": []}
    try:
        res["profile"] = {k: v for k, v in dataclasses.asdict(
            kronlinalg.planner.profile_for(cp.zeros(1))).items()
            if isinstance(v, (int, float, str, list, tuple, dict))}
    except Exception as exc:  # the profile is for offline refits only
        res["profile"] = repr(exc)

    def save():
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1, default=str)

    share_end = 0.0
    for sec in ORDER:
        share_end += SHARES[sec]
        if sec not in sections:
            continue
        deadline = START + share_end * args.budget

        def left(deadline=deadline):
            return deadline - time.time()

        if sec == "error":
            section_error(res)
        elif sec == "memory":
            if time.time() - START < args.budget:
                section_memory(res)
        else:
            {"leaf": section_leaf, "cases": section_cases, "stages": section_stages,
             "focus": section_focus}[sec](res, args, left)
        save()
    bad = [r for r in res["cases"] if r.get("regression")]
    print(f"\nno-regression check: {len(bad)} regression(s)",
          [(r["dtype"], r["m"], r["pick"], round(r["vs_cupy"], 3)) for r in bad])
    print(f"\nwall {time.time() - START:.0f} s")


if __name__ == "__main__":
    main()
