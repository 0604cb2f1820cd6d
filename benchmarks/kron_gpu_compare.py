"""CUDA kron_matmul against the CuPy "shuffle" algorithm, on the shared benchmark sets, in one run.

    python benchmarks/kron_gpu_compare.py [--sets kron_large,kron_small]
        [--dtypes float32,float64,float16,bfloat16] [--reps 10] [--json PATH] [--sweep]

For each case and dtype it times

* ours:    ``kronlinalg.kron_matmul(x, factors, algorithm="sliced")`` (the fused CUDA kernels);
* shuffle: ``kronlinalg.kron_matmul(x, factors, algorithm="shuffle")`` on the same arrays
           (reshape–matmul–transpose per factor through cuBLAS, what GPyTorch and PyKronecker
           do);

with CUDA events after a warm-up, as the median of ``--reps`` (>= 10) timings.  Cases whose
inputs fit in L2 rotate through several input sets, and a timing then covers a loop of calls
(host overhead included: for tiny problems that is what a caller waits for).  float32/float64/
float16 run on CuPy arrays, bfloat16 (which CuPy lacks) on torch tensors.  float16 factors are
scaled by 1/sqrt(P) (values stay near 1 along a long chain: float16 overflows at 65504).

Correctness in the same run: the relative Frobenius error of our result against a float64
reference computed on the GPU with the shuffle algorithm (on a sample of at most 32 rows for
large cases), <= 1e-5 (float32), 1e-12 (float64), 1e-2 (bfloat16, float16).

TFLOP/s counts the sliced multiply's 2 * M * sum_i L_i * Q_i flops (L_i the row length before
factor i); the roofline bound is max(bytes of X and Y once / bandwidth, flops / peak) with the
H100 anchors (2.96 TB/s; 51 TFLOP/s float32, 57 float64, 791 bfloat16 and float16).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(_HERE, "..", "..", "shared", "bench")
FALLBACK = {
    "kron_large": [[1024, 8, 6], [1024, 8, 7], [1024, 16, 5], [1024, 32, 4], [1024, 64, 3],
                   [1024, 128, 3], [16, 8, 8], [16, 16, 6], [16, 32, 5], [16, 64, 4]],
    "kron_small": [[16, [[2, 2], 10]], [64, [[4, 4], 5]], [8, [[8, 8], 3]], [32, [[3, 3], 6]],
                   [4, [[16, 16], 3]], [128, [[5, 7], [3, 2], [11, 4]]]],
}
ROOF = {"TBps": 2.96, "float32": 51.05, "float64": 57.32, "bfloat16": 791.3, "float16": 791.3}
TOL = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 1e-2, "float16": 1e-2}
L2_BYTES = 50 * 2**20


def load_cases(path):
    try:
        with open(path) as f:
            d = json.load(f)
        return {k: d[k]["cases"] for k in ("kron_large", "kron_small")}
    except (OSError, KeyError, ValueError):
        return FALLBACK


def load_roof(path):
    roof = dict(ROOF)
    try:
        with open(path) as f:
            a = json.load(f)
        roof["TBps"] = a["roof.copy"]["TBps"]
        roof["float32"] = a["roof.sgemm"]["TFLOPS"]
        roof["float64"] = a["roof.dgemm"]["TFLOPS"]
        roof["bfloat16"] = roof["float16"] = a["roof.hgemm"]["TFLOPS"]
    except (OSError, KeyError, ValueError):
        pass
    return roof


def shapes_of(set_name, case):
    """(M, [(P, Q), ...], label) of a case of either set."""
    if set_name == "kron_large":
        m, p, n = case
        return m, [(p, p)] * n, f"{m}x{p}^{n}"
    m, spec = case
    if len(spec) == 2 and isinstance(spec[1], int):
        shapes = [tuple(spec[0])] * spec[1]
        label = f"{m}x{spec[0][0]}x{spec[0][1]}^{spec[1]}"
    else:
        shapes = [tuple(s) for s in spec]
        label = f"{m}x" + ",".join(f"{p}x{q}" for p, q in shapes)
    return m, shapes, label



class Lib:
    """The array library a dtype runs on: CuPy for float32/float64/float16, torch for bfloat16."""

    def __init__(self, dtype):
        self.dtype = dtype
        if dtype == "bfloat16":
            import torch

            self.torch = torch
            self.mod = torch
        else:
            import cupy

            self.cupy = cupy
            self.mod = cupy

    def randn(self, shape, seed, dtype=None):
        dtype = dtype or self.dtype
        if self.mod.__name__ == "torch":
            g = self.torch.Generator(device="cuda").manual_seed(seed)
            a = self.torch.randn(shape, generator=g, device="cuda", dtype=self.torch.float32)
            return a.to(getattr(self.torch, dtype))
        rs = self.cupy.random.RandomState(seed)
        return rs.standard_normal(shape, dtype="float32" if dtype != "float64" else "float64"
                                  ).astype(dtype)

    def astype(self, a, dtype):
        if self.mod.__name__ == "torch":
            return a.to(getattr(self.torch, dtype))
        return a.astype(dtype)

    def event(self):
        if self.mod.__name__ == "torch":
            return self.torch.cuda.Event(enable_timing=True)
        return self.cupy.cuda.Event()

    def elapsed(self, a, b):
        if self.mod.__name__ == "torch":
            b.synchronize()
            return a.elapsed_time(b)
        b.synchronize()
        return self.cupy.cuda.get_elapsed_time(a, b)

    def record(self, e):
        e.record()

    def sync(self):
        if self.mod.__name__ == "torch":
            self.torch.cuda.synchronize()
        else:
            self.cupy.cuda.runtime.deviceSynchronize()

    def free(self):
        self.sync()
        if self.mod.__name__ == "torch":
            self.torch.cuda.empty_cache()
        else:
            self.cupy.get_default_memory_pool().free_all_blocks()

    def norm(self, a):
        if self.mod.__name__ == "torch":
            return float(self.torch.linalg.vector_norm(a.double()))
        return float(self.cupy.linalg.norm(a.astype("float64").ravel()))

    def is_oom(self, err):
        name = type(err).__name__
        return "OutOfMemory" in name or "out of memory" in str(err).lower()


WARMUP_MS = 200.0


def time_fn(lib, fn, reps, inner):
    """Median ms per call over `reps` timings of `inner` calls, after warm-up timings of at
    least WARMUP_MS in all (one at least).  (On the H100 the first 25-50 ms of a loop of heavy
    calls that follows host-side set-up ran 8-20 % slower than the rest, as clocks come up: one
    warm-up timing left that in the median of the M = 16 cases.)"""
    def timing():
        a, b = lib.event(), lib.event()
        lib.record(a)
        for i in range(inner):
            fn(i)
        lib.record(b)
        return lib.elapsed(a, b)

    spent = 0.0
    while spent < WARMUP_MS:
        spent += max(timing(), 1e-3)
    times = [timing() / inner for _ in range(reps)]
    return statistics.median(times), times


def run_case(set_name, case, dtype, args, roof, kl, kron_cuda):
    from kronlinalg.planner import kron_flops

    lib = Lib(dtype)
    m, shapes, label = shapes_of(set_name, case)
    k = math.prod(p for p, _ in shapes)
    nq = math.prod(q for _, q in shapes)
    esize = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}[dtype]
    bytes_xy = (m * k + m * nq) * esize
    flops = kron_flops(m, shapes)
    bound_ms = max(bytes_xy / (roof["TBps"] * 1e12), flops / (roof[dtype] * 1e12)) * 1e3
    row = {"set": set_name, "case": label, "dtype": dtype, "M": m,
           "shapes": [list(s) for s in shapes], "flops": flops, "bytes": bytes_xy,
           "bound_ms": bound_ms}
    # rotate input sets when they fit in L2, so repeated calls do not time the cache
    nsets = 1 if bytes_xy > L2_BYTES else min(16, max(2, math.ceil(2 * L2_BYTES / bytes_xy)))
    xs = [lib.randn((m, k), 1000 + i) for i in range(nsets)]
    fs = [lib.randn(s, 7 + j) for j, s in enumerate(shapes)]
    if dtype == "float16":
        fs = [f * (1.0 / math.sqrt(s[0])) for f, s in zip(fs, shapes)]
    # a timing of a few ms at least: loop tiny calls
    inner = 1
    # (a warm-up call whose result is dropped, then the one kept: holding the first result
    # during the second put float64 1024 x 8^7, 17 GB an array, out of memory; 1024 x 128^3,
    # three passes, still runs out)
    kl.kron_matmul(xs[0], fs, algorithm="sliced")
    lib.sync()
    t0 = time.perf_counter()
    out = kl.kron_matmul(xs[0], fs, algorithm="sliced")
    lib.sync()
    one = time.perf_counter() - t0
    if one < 2e-3:
        inner = max(1, min(200, int(2e-3 / max(one, 1e-6))))
    try:
        mid = xs[0]
        descs = [(0, p, q, q, 1) for p, q in shapes]
        row["plan"] = kron_cuda.config(1, m, descs, (256, m * k, k, 1), (256, m * nq, nq, 1),
                                       kron_cuda.DTYPES[dtype])
        del mid
    except Exception as err:  # noqa: BLE001 - report, do not stop the run
        row["plan"] = f"error: {err}"
    row["passes"] = int(row["plan"].split()[0].split("=")[1]) if row["plan"].startswith(
        "passes=") else None

    # correctness: a float64 shuffle reference on a sample of rows
    rows = list(range(m)) if m <= 32 else sorted(set(np.linspace(0, m - 1, 32).astype(int)))
    x64 = lib.astype(xs[0][rows], "float64")
    f64 = [lib.astype(f, "float64") for f in fs]
    ref = kl.kron_matmul(x64, f64, algorithm="shuffle")
    got = lib.astype(out[rows], "float64")
    row["relerr"] = lib.norm(got - ref) / lib.norm(ref)
    row["ok"] = bool(row["relerr"] <= TOL[dtype])
    del x64, f64, ref, got, out
    lib.free()

    ms, times = time_fn(lib, lambda i: kl.kron_matmul(xs[i % nsets], fs, algorithm="sliced"),
                        args.reps, inner)
    row.update(ms=ms, times=times, inner=inner, nsets=nsets)
    lib.free()
    if args.sweep and set_name == "kron_large":
        row["sweep"] = sweep(lib, kl, kron_cuda, xs, fs, args)
        lib.free()
    if not args.no_shuffle:
        try:
            sms, _ = time_fn(lib, lambda i: kl.kron_matmul(xs[i % nsets], fs,
                                                           algorithm="shuffle"),
                             max(3, args.reps // 2) if bytes_xy > 2**31 else args.reps, inner)
            row["shuffle_ms"] = sms
        except Exception as err:  # noqa: BLE001
            if not lib.is_oom(err):
                raise
            row["shuffle_ms"] = None
    del xs, fs
    lib.free()
    row["TFLOPS"] = flops / (ms * 1e-3) / 1e12
    row["roof_frac"] = bound_ms / ms
    row["speedup"] = row["shuffle_ms"] / ms if row.get("shuffle_ms") else None
    return row


def sweep(lib, kl, kron_cuda, xs, fs, args):
    """Times the tile overrides (lines per tile, smem budget) on this case; the planner's pick is
    ('auto', 0)."""
    res = []
    for lines, budget in [(0, 0), (4, 0), (8, 0), (16, 0), (32, 0), (64, 0), (128, 0),
                          (0, 112), (0, 160)]:
        kron_cuda.tune(lines=lines, smem_budget_kb=budget)
        try:
            kl.kron_matmul(xs[0], fs, algorithm="sliced")
            ms, _ = time_fn(lib, lambda i: kl.kron_matmul(xs[0], fs, algorithm="sliced"),
                            max(3, args.reps // 3), 1)
            res.append({"lines": lines, "budget_kb": budget, "ms": ms})
        except Exception as err:  # noqa: BLE001
            res.append({"lines": lines, "budget_kb": budget, "error": str(err)[:80]})
        finally:
            kron_cuda.tune()
    return res


def smoke(light=False):
    """Small shapes through every kernel path, checked, untimed: for compute-sanitizer runs
    (light: one shape per kernel path, float32 and bfloat16, for racecheck)."""
    import kronlinalg as kl

    shapes_list = [[(8, 8)] * 3, [(16, 16)] * 2, [(5, 7), (3, 2), (11, 4)], [(2, 2)] * 6,
                   [(64, 64)], [(128, 128)], [(8, 8)] * 5, [(32, 32)] * 2]
    dtypes = ("float32", "float64", "float16", "bfloat16")
    if light:
        shapes_list = [[(8, 8)] * 4, [(16, 16)] * 2, [(5, 7), (3, 2)], [(128, 128)]]
        dtypes = ("float32", "bfloat16")
    bad = 0
    for dtype in dtypes:
        lib = Lib("bfloat16" if dtype == "bfloat16" else "float32")
        for shapes in shapes_list:
            for side in ("right", "left"):
                for m, beta in (((37, 0.5),) if light else ((3, 0.0), (37, 0.5))):
                    k = math.prod(p for p, _ in shapes)
                    nq = math.prod(q for _, q in shapes)
                    xs = (m, k) if side == "right" else (k, m)
                    fsh = shapes if side == "right" else [(q, p) for p, q in shapes]
                    x = lib.randn(xs, 1, dtype)
                    fs = [lib.randn(s, 2 + i, dtype) for i, s in enumerate(fsh)]
                    kw = {}
                    if beta:
                        kw = {"y": lib.randn((m, nq) if side == "right" else (nq, m), 9, dtype),
                              "beta": beta}
                    out = kl.kron_matmul(x, fs, side=side, alpha=1.5, algorithm="sliced", **kw)
                    x64 = lib.astype(x, "float64")
                    f64 = [lib.astype(f, "float64") for f in fs]
                    kw64 = {k_: (lib.astype(v, "float64") if k_ == "y" else v)
                            for k_, v in kw.items()}
                    ref = kl.kron_matmul(x64, f64, side=side, alpha=1.5, algorithm="shuffle",
                                         **kw64)
                    err = lib.norm(lib.astype(out, "float64") - ref) / lib.norm(ref)
                    tol = {"float32": 1e-5, "float64": 1e-12}.get(dtype, 2e-2)
                    if not err <= tol:
                        bad += 1
                        print("WRONG", dtype, shapes, side, m, beta, err, flush=True)
        lib.sync()
    print(f"smoke: {bad} wrong", flush=True)
    return 1 if bad else 0


def once(args):
    import kronlinalg as kl

    cases = load_cases(args.cases)
    only = set(filter(None, args.only.split(",")))
    for set_name in args.sets.split(","):
        for case in cases[set_name]:
            m, shapes, label = shapes_of(set_name, case)
            if only and label not in only:
                continue
            for dtype in args.dtypes.split(","):
                lib = Lib(dtype)
                x = lib.randn((m, math.prod(p for p, _ in shapes)), 1)
                fs = [lib.randn(sh, 2 + i) for i, sh in enumerate(shapes)]
                for _ in range(2):
                    kl.kron_matmul(x, fs, algorithm="sliced")
                lib.sync()
                print("ran", label, dtype, flush=True)
                del x, fs
                lib.free()
    return 0


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=os.path.join(SHARED, "cases.json"))
    ap.add_argument("--anchors", default=os.path.join(SHARED, "h100-anchors-2026-11-22.json"))
    ap.add_argument("--sets", default="kron_large,kron_small")
    ap.add_argument("--dtypes", default="float32,float64,bfloat16")
    ap.add_argument("--only", default="", help="comma-separated case labels to run")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-shuffle", action="store_true")
    ap.add_argument("--no-ieee", action="store_true",
                    help="skip re-timing float32 on CUDA cores for the half types' ratios")
    ap.add_argument("--sweep", action="store_true", help="also time tile overrides (kron_large)")
    ap.add_argument("--fp32", choices=("tf32x3", "ieee"), default=None,
                    help="float32 mode of the CUDA kernels (kron.float32_precision; default: "
                         "the library's default)")
    ap.add_argument("--kind", choices=("auto", "ffma", "tc"), default="auto",
                    help="kernel kind where both apply: the planner's choice, CUDA cores, or "
                         "tensor cores for every group with P %% 8 == 0 (kron_cuda.tune(kind=))")
    ap.add_argument("--tile-q", type=int, default=0,
                    help="column tile of the kernels (kron_cuda.tune(tile_q=)); 0: the planner's")
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true",
                    help="small shapes over every kernel path, untimed (for compute-sanitizer)")
    ap.add_argument("--smoke-light", action="store_true", help="fewer smoke shapes (racecheck)")
    ap.add_argument("--once", action="store_true",
                    help="run each selected case twice, untimed (for Nsight Compute)")
    args = ap.parse_args(argv)
    if args.fp32:
        from kronlinalg.kron import float32_precision

        float32_precision(args.fp32)
    if args.kind != "auto" or args.tile_q:
        from kronlinalg.testing import extension
        kron_cuda = extension("kron_cuda")

        kron_cuda.tune(tile_q=args.tile_q, kind={"auto": -1, "ffma": 0, "tc": 1}[args.kind])
    if args.smoke or args.smoke_light:
        return smoke(light=args.smoke_light)
    if args.once:
        return once(args)
    args.reps = max(args.reps, 10) if not args.sweep else args.reps

    import kronlinalg as kl
    from kronlinalg.testing import extension
    kron_cuda = extension("kron_cuda")
    from kronlinalg.kron import float32_precision

    if kron_cuda is None:
        sys.exit("kronlinalg was built without CUDA")
    cases = load_cases(args.cases)
    roof = load_roof(args.anchors)
    only = set(filter(None, args.only.split(",")))
    rows = []
    hdr = (f"{'case':<26}{'dtype':<10}{'ours ms':>10}{'shuffle ms':>12}{'speedup':>9}"
           f"{'TFLOP/s':>9}{'roof':>7}{'relerr':>10}{'passes':>7}")
    print(f"float32 mode: {float32_precision()}, kernel kind: {args.kind}, tile_q: {args.tile_q}")
    print(hdr)
    for set_name in args.sets.split(","):
        for case in cases[set_name]:
            for dtype in args.dtypes.split(","):
                label = shapes_of(set_name, case)[2]
                if only and label not in only:
                    continue
                try:
                    r = run_case(set_name, case, dtype, args, roof, kl, kron_cuda)
                except Exception as err:  # noqa: BLE001 - one failing case must not end the run
                    lib = Lib(dtype)
                    lib.free()
                    r = {"set": set_name, "case": label, "dtype": dtype,
                         "error": f"{type(err).__name__}: {str(err)[:200]}"}
                    print(f"{label:<26}{dtype:<10} ERROR {r['error']}", flush=True)
                    rows.append(r)
                    continue
                rows.append(r)
                sp = f"{r['speedup']:.1f}x" if r.get("speedup") else "n/a"
                sh = f"{r['shuffle_ms']:.3f}" if r.get("shuffle_ms") else "n/a"
                print(f"{r['case']:<26}{dtype:<10}{r['ms']:>10.3f}{sh:>12}{sp:>9}"
                      f"{r['TFLOPS']:>9.2f}{r['roof_frac']:>7.2f}{r['relerr']:>10.1e}"
                      f"{str(r['passes']):>7}{'' if r['ok'] else '  WRONG'}", flush=True)
    summary = {}
    for set_name in args.sets.split(","):
        for dtype in args.dtypes.split(","):
            rs = [r for r in rows if r["set"] == set_name and r["dtype"] == dtype and "ms" in r]
            if not rs:
                continue
            summary[f"{set_name}.{dtype}"] = {
                "median_speedup": median([r.get("speedup") for r in rs]),
                "median_roof_frac": median([r["roof_frac"] for r in rs]),
                "all_ok": all(r["ok"] for r in rs), "n": len(rs)}
    # the half types' tensor cores against our float32 on kron_large with P >= 16: the float32
    # rows above (the mode in force) and, when that is 3xTF32, the float32 CUDA cores (the
    # issue's baseline) timed again here under float32_precision("ieee") (unless --no-ieee)
    halves = [h for h in ("bfloat16", "float16") if h in args.dtypes.split(",")]
    big_of = {h: [r for r in rows if r.get("dtype") == h and r.get("set") == "kron_large"
                  and "ms" in r and r["shapes"][0][0] >= 16] for h in halves}
    big = [r for h in halves for r in big_of[h]]
    f32_rows = {"": [r for r in rows if r.get("dtype") == "float32" and "ms" in r]}
    if (big and not args.no_ieee and "float32" in args.dtypes.split(",")
            and float32_precision() == "tf32x3"):
        ieee_args = argparse.Namespace(**{**vars(args), "no_shuffle": True, "sweep": False})
        prev = float32_precision("ieee")
        try:
            f32_rows["_ieee"] = []
            for case in cases["kron_large"]:
                if any(r["case"] == shapes_of("kron_large", case)[2] for r in big):
                    f32_rows["_ieee"].append(run_case("kron_large", case, "float32", ieee_args,
                                                      roof, kl, kron_cuda))
        finally:
            float32_precision(prev)
    for h in halves:
        short = {"bfloat16": "bf16", "float16": "f16"}[h]
        for tag, f32s in f32_rows.items():
            ratios = [f[0]["ms"] / r["ms"] for r in big_of[h]
                      for f in [[s for s in f32s if s["case"] == r["case"]]] if f]
            if ratios:
                summary[f"{short}_over_f32{tag}_P>=16"] = {
                    "median": statistics.median(ratios), "min": min(ratios), "n": len(ratios)}
    print()
    for k, v in summary.items():
        print(k, json.dumps({a: (round(b, 3) if isinstance(b, float) else b)
                             for a, b in v.items()}))
    if args.json:
        dev = {}
        try:
            import cupy

            p = cupy.cuda.runtime.getDeviceProperties(0)
            dev = {"name": p["name"].decode(), "sms": p["multiProcessorCount"]}
        except Exception:  # noqa: BLE001
            pass
        with open(args.json, "w") as f:
            json.dump({"device": dev, "roof": roof, "rows": rows, "summary": summary,
                       "fp32": float32_precision(), "kind": args.kind, "command": " ".join(sys.argv)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
