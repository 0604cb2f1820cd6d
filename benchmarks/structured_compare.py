"""structured_matmul: the one-pass kernel against the bmm and dense algorithms, in one run.

Patterns are sampled (seeded) from the `kronecker_sparse` generator of ../shared/bench/cases.json,
the Kronecker-sparse paper's: a = 1 with b, c in `beta` and d in `d1`, plus a > 1 (from `alpha`)
with d in `d2`; b == c or b == 4c or c == 4b; the paper's int32 limits (batch·a·c·d, batch·a·b·d,
a·b·c·d < 2^31) and, to fit the time budget, a·b·d and a·c·d <= --max-dim.

    python benchmarks/structured_compare.py --device cpu             # 30 patterns, B = 2048
    python benchmarks/structured_compare.py --device gpu --json out.json

GPU (CuPy arrays, CUDA events, median of --reps after warm-up; device time: a spinning kernel
queued ahead of the start event hides the host's time before the launches, --timer call counts
it), batch 25088, float32, float16
and bfloat16, both layouts: times of the kernel (one launch per factor, called through its thin
wrapper), the bmm algorithm in CuPy (permute → cupy.matmul → permute, what the KS paper calls
bmm), dense (x @ W.T with W formed beforehand), and, where it applies (batch_last, or d = 1),
our "strided" algorithm (cuBLAS strided-batched GEMMs on views of x and y, K transposed per
call, through the public call); reports the median kernel/bmm speedup, the
fraction of patterns on which the planner's choice is within 5 % of min(bmm, dense) — by the
cost model, and after measured planning (structured.tune on the pattern; --no-tune skips it) —
the fraction of half-precision cases where the kernel (or ours: the faster of the kernel and
strided; or the planner's choice) beats both; the same with the weights packed once
(structured.KSPacked: strided and block_dense timed without forming K per call, the planner's
choice for a packed chain through the public call), and the two ViT-S/16 chains
against the dense layer of the same size.  Dense is not timed where its flop count alone at the
device's GEMM peak already exceeds 1.05 × the best other time (it cannot be the minimum).

CPU (NumPy arrays): 30 patterns scaled to batch 2048, the kernel against NumPy bmm (the library's
algorithm="bmm"), per pattern the best of --reps runs (the machine's other load only ever adds
time), median speedup over the patterns.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
from kronlinalg.planner.costs import structured as costs

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "data", "cases.json")
INT32 = 2**31 - 1


def load_cases(path):
    for p in (path, os.path.join(HERE, "..", "..", "shared", "bench", "cases.json")):
        if p and os.path.exists(p):
            with open(p, encoding="utf-8") as fh:
                return json.load(fh)["kronecker_sparse"]
    raise SystemExit(f"cases.json not found (tried {path}); pass --cases")


def generator_patterns(ks, batch, max_dim):
    """All patterns of the generator that pass its filters, in a fixed order."""
    out = []
    pairs = [(b, c) for b in ks["beta"] for c in ks["beta"] if b == c or b == 4 * c or c == 4 * b]
    for a in ks["alpha"]:
        for d in (ks["d1"] if a == 1 else ks["d2"]):
            for b, c in pairs:
                n, m = a * c * d, a * b * d
                if batch * n > INT32 or batch * m > INT32 or a * b * c * d > INT32:
                    continue
                if n > max_dim or m > max_dim:
                    continue
                out.append((a, b, c, d))
    return out


def sample(ks, count, seed, batch, max_dim):
    pats = generator_patterns(ks, batch, max_dim)
    rng = np.random.default_rng(seed)
    idx = sorted(rng.choice(len(pats), size=min(count, len(pats)), replace=False))
    return [pats[i] for i in idx], len(pats)


# ---------------------------------------------------------------------------------------------
# CPU


def run_cpu(args, ks):
    import kronlinalg
    from kronlinalg.structured import KSFactor

    B = args.batch or 2048
    pats, pool = sample(ks, args.patterns or 30, args.seed, B, args.max_dim)
    rng = np.random.default_rng(args.seed)
    rows = []
    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; batch {B}; "
          f"{len(pats)} of {pool} generator patterns (seed {args.seed}, a·b·d, a·c·d <= "
          f"{args.max_dim}); float32; best of {args.reps} runs")
    print(f"{'pattern':>20} {'layout':>11} {'kernel ms':>10} {'bmm ms':>10} {'speedup':>8} "
          f"{'auto':>7}")
    for p in pats:
        a, b, c, d = p
        f = KSFactor(p, rng.standard_normal(p).astype(np.float32))
        for layout in ("batch_first", "batch_last"):
            n = a * c * d
            x = rng.standard_normal((B, n) if layout == "batch_first" else (n, B)).astype(np.float32)
            times = {}
            for alg in ("kernel", "bmm"):
                fn = lambda: kronlinalg.structured_matmul(x, f, layout=layout, algorithm=alg)  # noqa: E731
                fn()
                ts = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t0)
                times[alg] = min(ts)
            auto = kronlinalg.plan("structured_matmul", x.shape, p, dtype="float32",
                                   layout=layout)[0].name
            ref = kronlinalg.structured_matmul(x, f, layout=layout, algorithm="bmm")
            got = kronlinalg.structured_matmul(x, f, layout=layout, algorithm="kernel")
            err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            row = {"pattern": p, "layout": layout, "batch": B, "kernel_ms": times["kernel"] * 1e3,
                   "bmm_ms": times["bmm"] * 1e3, "speedup": times["bmm"] / times["kernel"],
                   "auto": auto, "rel_err_vs_bmm": err}
            rows.append(row)
            print(f"{str(p):>20} {layout:>11} {row['kernel_ms']:10.2f} {row['bmm_ms']:10.2f} "
                  f"{row['speedup']:8.2f} {auto:>7}", flush=True)
    speed = [r["speedup"] for r in rows]
    summary = {
        "median_speedup_kernel_over_bmm": statistics.median(speed),
        "median_speedup_batch_first": statistics.median(
            r["speedup"] for r in rows if r["layout"] == "batch_first"),
        "median_speedup_batch_last": statistics.median(
            r["speedup"] for r in rows if r["layout"] == "batch_last"),
        "kernel_faster_fraction": sum(s > 1 for s in speed) / len(speed),
        "max_rel_err_vs_bmm": max(r["rel_err_vs_bmm"] for r in rows),
    }
    print(json.dumps(summary, indent=1))
    return {"device": "cpu", "cpu": platform.processor(), "cores": os.cpu_count(), "batch": B,
            "seed": args.seed, "max_dim": args.max_dim, "pool": pool, "rows": rows,
            "summary": summary}


# ---------------------------------------------------------------------------------------------
# GPU


# A one-thread kernel that keeps the stream busy for a while: queued before the start event, it
# lets the host enqueue the timed call's launches before the event fires, so that the timing is
# the device's (the host's Python and launch time, 5-30 µs per call here, otherwise counts).
_SPIN = r"""
__device__ unsigned long long kl_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
extern "C" __global__ void kl_bench_spin(unsigned long long ns) {
  const unsigned long long t0 = kl_now();
  while (kl_now() - t0 < ns) {}
}
"""


def _gpu_timer(cp, reps, warmup=2, device_time=True):
    """timeit(fn): median over `reps` calls of the CUDA-event time of one call; device_time:
    with the stream held busy ~0.3 ms before each start event (_SPIN), so that host time
    spent before the call's launches is not counted (the calls' own device gaps still are)."""
    spin = cp.RawKernel(_SPIN, "kl_bench_spin") if device_time else None

    def timeit(fn):
        for _ in range(warmup):
            fn()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        ts, hosts = [], []
        for _ in range(reps):
            if spin is not None:
                spin((1,), (1,), (np.uint64(300_000),))
            start.record()
            t0 = time.perf_counter()
            fn()
            hosts.append((time.perf_counter() - t0) * 1e3)
            end.record()
            end.synchronize()
            ts.append(cp.cuda.get_elapsed_time(start, end))
        # the host time of one call (enqueue only): where it passes the spin's 0.3 ms, the
        # excess shows in the device time too
        timeit.last_host_ms = statistics.median(hosts)
        return statistics.median(ts)

    timeit.last_host_ms = None

    return timeit


def _lib_for(dtype):
    """The library whose arrays (and matmul) the baselines use: CuPy, torch for bfloat16."""
    return "torch" if dtype == "bfloat16" else "cupy"


def _ours_packed_ms(r):
    return min(v for v in (r["kernel_ms"], r["strided_packed_ms"], r["block_dense_packed_ms"])
               if v is not None)


def _strict_wins(rows, which):
    """Fraction of rows per dtype where `which` (ours packed: the fastest of the kernel and the
    packed strided and block_dense; or the planner's packed public call) beats both baselines,
    an a = d = 1 row only by more than 2 %."""
    out = {}
    for dtype in sorted({r["dtype"] for r in rows}):
        mine = [r for r in rows if r["dtype"] == dtype]
        wins = 0
        for r in mine:
            ours = _ours_packed_ms(r) if which == "ours_packed" else r["auto_packed_call_ms"]
            a, _, _, d = r["pattern"]
            need = 1.02 if a == 1 and d == 1 else 1.0
            wins += min(r["bmm_ms"], r["dense_ms"] or float("inf")) > need * ours
        out[dtype] = wins / len(mine)
    return out


def run_gpu(args, ks):
    import cupy as cp

    import kronlinalg
    from kronlinalg import structured
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")
    from kronlinalg.planner import profile_for

    if ks_cuda is None:
        raise SystemExit("kronlinalg was built without CUDA")
    B = args.batch or ks["batch"]
    pats, pool = sample(ks, args.patterns or 120, args.seed, B, args.max_dim)
    timeit = _gpu_timer(cp, args.reps, device_time=args.timer == "device")
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    name = dev["name"].decode() if isinstance(dev["name"], bytes) else dev["name"]
    prof = profile_for("cuda")
    dtypes = [d for d in args.dtypes.split(",") if d]
    print(f"GPU: {name}; batch {B}; {len(pats)} of {pool} generator patterns (seed {args.seed}, "
          f"a·b·d, a·c·d <= {args.max_dim}); {', '.join(dtypes)}; both layouts; CUDA events, "
          f"median of {args.reps}")
    codes = {"float32": 0, "float16": 2, "bfloat16": 3}
    rows = []
    t_start = time.time()
    for p in pats:
        a, b, c, d = p
        n, m = a * c * d, a * b * d
        for dtype in dtypes:
            lib = _lib_for(dtype)
            ops = _GpuOps(lib, dtype)
            vals = ops.randn(p)
            for layout in ("batch_first", "batch_last"):
                first = layout == "batch_first"
                x = ops.randn((B, n) if first else (n, B))
                y = ops.empty((B, m) if first else (m, B))
                stream = ops.stream()
                vdesc = (ops.ptr(vals),) + ops.strides(vals)

                def kernel():
                    ks_cuda.matmul(p, B, 0 if first else 1, vdesc, (ops.ptr(x), x.shape[1]),
                                   (ops.ptr(y), y.shape[1]), codes[dtype], stream)

                f = structured.KSFactor(p, vals)
                # the paper's bmm keeps its weights in batched layout: permute them once here
                kb = ops.contiguous(structured.bmm_weights(ops.xp, vals, p, layout))
                bmm = lambda: structured.bmm_apply(ops.xp, x, kb, p, layout)  # noqa: E731
                t = {"kernel": ops.time(timeit, kernel), "bmm": ops.time(timeit, bmm)}
                # ours too: cuBLAS strided-batched GEMMs on views (batch_last, or d = 1), K
                # transposed per call, through the public call's cached fast path
                lds = costs.strided_lds(p, {"B": B, "layout": layout})
                if costs.strided_fits(p, layout, B, *lds):
                    t["strided"] = ops.time(timeit, lambda: kronlinalg.structured_matmul(
                        x, f, layout=layout, algorithm="strided"))
                # and block_dense (a, d > 1): the diagonal blocks formed dense per call, one GEMM
                block_dense = costs.block_dense_pays(p) and costs.strided_fits(
                    costs.dense_slabs(p), layout, B, *lds)
                if block_dense:
                    t["block_dense"] = ops.time(timeit, lambda: kronlinalg.structured_matmul(
                        x, f, layout=layout, algorithm="block_dense"))
                # the same with the weights packed once (KSPacked), as the baselines' are: K's
                # transposed blocks and the dense diagonal blocks formed before the timing
                packed = structured.KSPacked(f)
                for alg, runs in (("strided", "strided" in t), ("block_dense", block_dense)):
                    if runs:
                        call = lambda: kronlinalg.structured_matmul(  # noqa: E731
                            x, packed, layout=layout, algorithm=alg)
                        call()
                        t[alg + "_packed"] = ops.time(timeit, call)
                # dense: skipped when its flops alone at the GEMM peak cannot beat the others
                floor = 2.0 * B * m * n / prof.flops(dtype) * 1e3
                w_bytes = m * n * ops.itemsize
                if floor > 1.05 * min(t.values()) or w_bytes > args.max_dense_bytes:
                    t["dense"] = None
                else:
                    w = f.to_dense()
                    dense = (lambda: x @ w.T) if first else (lambda: w @ x)  # noqa: E731
                    t["dense"] = ops.time(timeit, dense)
                    del w
                kernel()
                ref = bmm()
                err = ops.rel_err(y, ref)
                auto = kronlinalg.plan("structured_matmul", tuple(x.shape), p, dtype=dtype,
                                       device="cuda", layout=layout)[0].name
                base = min(v for k, v in t.items() if k in ("bmm", "dense") and v is not None)
                ours = min(t["kernel"], t.get("strided") or float("inf"),
                           t.get("block_dense") or float("inf"))
                ours_packed = min(ours, t.get("strided_packed") or float("inf"),
                                  t.get("block_dense_packed") or float("inf"))
                row = {"pattern": p, "dtype": dtype, "layout": layout, "lib": lib,
                       "kernel_ms": t["kernel"], "strided_ms": t.get("strided"),
                       "block_dense_ms": t.get("block_dense"),
                       "strided_packed_ms": t.get("strided_packed"),
                       "block_dense_packed_ms": t.get("block_dense_packed"),
                       "bmm_ms": t["bmm"], "dense_ms": t["dense"],
                       "dense_floor_ms": floor, "speedup_vs_bmm": t["bmm"] / t["kernel"],
                       "speedup_vs_best_baseline": base / t["kernel"],
                       "speedup_ours_vs_best_baseline": base / ours,
                       "speedup_ours_packed_vs_best_baseline": base / ours_packed, "auto": auto,
                       "auto_ms": t[auto] if t.get(auto) is not None else float("inf"),
                       "rel_err_vs_bmm": err,
                       "bytes_floor_ms": B * (n + m) * ops.itemsize / prof.bandwidth * 1e3}
                row["auto_within_5pct"] = row["auto_ms"] <= 1.05 * base
                # the same choice through the public call: validation, K formed per call for
                # dense, the bmm weights permuted per call
                row["auto_call_ms"] = ops.time(timeit, lambda: kronlinalg.structured_matmul(
                    x, f, layout=layout))
                row["auto_call_within_5pct"] = row["auto_call_ms"] <= 1.05 * base
                # packed: the planner prices the algorithms without their per-call weight work
                # (dense and bmm then run the baselines' own calls)
                row["auto_packed"] = kronlinalg.plan(
                    "structured_matmul", tuple(x.shape), p, dtype=dtype, device="cuda",
                    layout=layout, packed=True)[0].name
                row["auto_packed_call_ms"] = ops.time(timeit, lambda: kronlinalg.structured_matmul(
                    x, packed, layout=layout))
                row["auto_packed_call_host_ms"] = timeit.last_host_ms
                row["auto_packed_call_within_5pct"] = row["auto_packed_call_ms"] <= 1.05 * base
                # what the packed call's first run measured, where it measures (a = d = 1)
                after = kronlinalg.plan("structured_matmul", tuple(x.shape), p, dtype=dtype,
                                        device="cuda", layout=layout, packed=True)
                row["auto_packed_measured_ms"] = ({c.name: c.seconds * 1e3 for c in after}
                                                  if after[0].details.get("measured") else None)
                if args.tune:  # measured planning (structured.tune), then the public call again
                    row["tuned"] = next(iter(structured.tune(x, f, layout=layout)))
                    tuned_ms = t.get(row["tuned"])
                    row["tuned_ms"] = tuned_ms if tuned_ms is not None else float("inf")
                    row["tuned_within_5pct"] = row["tuned_ms"] <= 1.05 * base
                    row["tuned_call_ms"] = ops.time(timeit, lambda: kronlinalg.structured_matmul(
                        x, f, layout=layout))
                    row["tuned_call_within_5pct"] = row["tuned_call_ms"] <= 1.05 * base
                rows.append(row)
                strided = f"{t['strided']:8.3f}" if "strided" in t else f"{'-':>8}"
                blockd = f"{t['block_dense']:8.3f}" if "block_dense" in t else f"{'-':>8}"
                print(f"{str(p):>20} {dtype:>8} {layout:>11} kernel {t['kernel']:8.3f} strided "
                      f"{strided} block_dense {blockd} bmm "
                      f"{t['bmm']:8.3f} dense {t['dense'] if t['dense'] is not None else '-':>8} "
                      f"x{row['speedup_vs_bmm']:5.2f} auto={auto} packed: "
                      f"{_ms(t.get('strided_packed'))} {_ms(t.get('block_dense_packed'))} "
                      f"auto={row['auto_packed']} {row['auto_packed_call_ms']:.3f} "
                      f"err={err:.1e}", flush=True)
                del x, y
            del vals
            ops.free()
    kronlinalg.planner.clear_cache()  # the chains below are planned by the model
    vit = _vit_chains(args, ks, timeit, B, dtypes, prof)
    f32 = [r for r in rows if r["dtype"] == "float32"]
    half = [r for r in rows if r["dtype"] != "float32"]
    summary = {
        "median_speedup_kernel_over_bmm_float32": statistics.median(
            r["speedup_vs_bmm"] for r in f32) if f32 else None,
        "median_speedup_kernel_over_bmm_all": statistics.median(r["speedup_vs_bmm"] for r in rows),
        "auto_within_5pct_fraction": sum(r["auto_within_5pct"] for r in rows) / len(rows),
        "auto_within_5pct_fraction_float32": (
            sum(r["auto_within_5pct"] for r in f32) / len(f32)) if f32 else None,
        "auto_call_within_5pct_fraction_float32": (
            sum(r["auto_call_within_5pct"] for r in f32) / len(f32)) if f32 else None,
        "auto_call_within_5pct_fraction": sum(r["auto_call_within_5pct"] for r in rows) / len(rows),
        "auto_packed_call_within_5pct_fraction_float32": (
            sum(r["auto_packed_call_within_5pct"] for r in f32) / len(f32)) if f32 else None,
        "auto_packed_call_within_5pct_fraction": (
            sum(r["auto_packed_call_within_5pct"] for r in rows) / len(rows)),
        **({"tuned_within_5pct_fraction": sum(r["tuned_within_5pct"] for r in rows) / len(rows),
            "tuned_call_within_5pct_fraction": (
                sum(r["tuned_call_within_5pct"] for r in rows) / len(rows))} if args.tune else {}),
        "half_kernel_beats_all_baselines_fraction": (
            sum(r["speedup_vs_best_baseline"] > 1 for r in half) / len(half)) if half else None,
        # the kernel, the strided GEMMs or block_dense, whichever is fastest (all are ours)
        "half_ours_beats_all_baselines_fraction": (
            sum(r["speedup_ours_vs_best_baseline"] > 1 for r in half) / len(half))
        if half else None,
        # the same with the weights packed (KSPacked) as the baselines' are
        "half_ours_packed_beats_all_baselines_fraction": (
            sum(r["speedup_ours_packed_vs_best_baseline"] > 1 for r in half) / len(half))
        if half else None,
        "half_auto_packed_call_beats_all_baselines_fraction": (
            sum(r["auto_packed_call_ms"] < min(r["bmm_ms"], r["dense_ms"] or float("inf"))
                for r in half) / len(half)) if half else None,
        # per half dtype, a = d = 1 rows (one dense GEMM, the baselines' own) counted only
        # where ours is faster by more than 2 %
        "half_ours_packed_beats_all_strict": _strict_wins(half, "ours_packed"),
        "half_auto_packed_call_beats_all_strict": _strict_wins(half, "auto_packed_call"),
        "half_auto_beats_all_baselines_fraction": (
            sum(r["auto_ms"] < min(r["bmm_ms"], r["dense_ms"] or float("inf")) for r in half)
            / len(half)) if half else None,
        "max_rel_err_vs_bmm": {dt: max(r["rel_err_vs_bmm"] for r in rows if r["dtype"] == dt)
                               for dt in dtypes},
        "seconds": time.time() - t_start,
    }
    print(json.dumps(summary, indent=1))
    for v in vit:
        print(f"ViT-S/16 {v['chain']} {v['dtype']} {v['layout']}: chain (kernel) {v['chain_ms']:.3f} "
              f"ms, chain (auto: {v['auto']}) {v['auto_ms']:.3f} ms, packed (auto: "
              f"{v['auto_packed']}) {v['auto_packed_ms']:.3f} ms, dense layer {v['dense_ms']:.3f} "
              f"ms, dense/chain {v['dense_ms'] / v['chain_ms']:.2f}")
    return {"device": name, "batch": B, "seed": args.seed, "max_dim": args.max_dim, "pool": pool,
            "reps": args.reps, "rows": rows, "vit_s16": vit, "summary": summary}


def _ms(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _vit_chains(args, ks, timeit, B, dtypes, prof):
    import kronlinalg
    from kronlinalg import structured

    out = []
    for chain_pats in ks["vit_s16_chains"]:
        chain_pats = [tuple(q) for q in chain_pats]
        for dtype in dtypes:
            ops = _GpuOps(_lib_for(dtype), dtype)
            chain = structured.KSChain([structured.KSFactor(q, ops.randn(q)) for q in chain_pats])
            m, n = chain.shape
            w = chain.to_dense()
            for layout in ("batch_first", "batch_last"):
                first = layout == "batch_first"
                x = ops.randn((B, n) if first else (n, B))
                run = lambda alg: kronlinalg.structured_matmul(  # noqa: E731
                    x, chain, layout=layout, algorithm=alg)
                auto = kronlinalg.plan("structured_matmul", tuple(x.shape), *chain_pats,
                                       dtype=dtype, device="cuda", layout=layout)[0].name
                packed = structured.KSPacked(chain)
                run_packed = lambda: kronlinalg.structured_matmul(  # noqa: E731
                    x, packed, layout=layout)
                run_packed()
                dense = (lambda: x @ w.T) if first else (lambda: w @ x)  # noqa: E731
                out.append({"chain": chain_pats, "dtype": dtype, "layout": layout,
                            "chain_ms": ops.time(timeit, lambda: run("kernel")),
                            "bmm_ms": ops.time(timeit, lambda: run("bmm")),
                            "auto": auto, "auto_ms": ops.time(timeit, lambda: run("auto")),
                            "auto_packed": kronlinalg.plan(
                                "structured_matmul", tuple(x.shape), *chain_pats, dtype=dtype,
                                device="cuda", layout=layout, packed=True)[0].name,
                            "auto_packed_ms": ops.time(timeit, run_packed),
                            "dense_ms": ops.time(timeit, dense), "shape": (m, n)})
            ops.free()
    return out


class _GpuOps:
    """The few library calls the GPU benchmark needs, for CuPy or torch arrays."""

    def __init__(self, lib, dtype):
        import array_api_compat

        self.lib, self.dtype = lib, dtype
        if lib == "cupy":
            import cupy as cp

            self.mod = cp
            self.xp = array_api_compat.array_namespace(cp.empty(0))
        else:
            import torch

            self.mod = torch
            self.xp = array_api_compat.array_namespace(torch.empty(0, device="cuda"))
        self.itemsize = 4 if dtype == "float32" else 2

    def randn(self, shape):
        if self.lib == "cupy":
            cp = self.mod
            return cp.random.standard_normal(shape, dtype=cp.float32).astype(self.dtype)
        torch = self.mod
        return torch.randn(shape, device="cuda", dtype=getattr(torch, self.dtype))

    def empty(self, shape):
        if self.lib == "cupy":
            return self.mod.empty(shape, dtype=self.dtype)
        return self.mod.empty(shape, device="cuda", dtype=getattr(self.mod, self.dtype))

    def contiguous(self, a):
        return self.mod.ascontiguousarray(a) if self.lib == "cupy" else a.contiguous()

    def ptr(self, a):
        return a.data.ptr if self.lib == "cupy" else a.data_ptr()

    def strides(self, a):
        return tuple(s // a.itemsize for s in a.strides) if self.lib == "cupy" else tuple(a.stride())

    def stream(self):
        if self.lib == "cupy":
            return self.mod.cuda.get_current_stream().ptr
        return self.mod.cuda.current_stream().cuda_stream

    def time(self, timeit, fn):
        if self.lib == "cupy":
            return timeit(fn)
        torch = self.mod  # torch work goes to torch's current stream: sync it around the events
        torch.cuda.synchronize()
        import cupy as cp

        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            return timeit(fn)

    def rel_err(self, got, ref):
        if self.lib == "cupy":
            g, r = got.astype("float64"), ref.astype("float64")
            return float(self.mod.linalg.norm(g - r) / self.mod.linalg.norm(r))
        g, r = got.double(), ref.double()
        return float((g - r).norm() / r.norm())

    def free(self):
        if self.lib == "cupy":
            self.mod.get_default_memory_pool().free_all_blocks()
        else:
            self.mod.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# GPU smoke run: every tile shape of the CUDA kernels once, for compute-sanitizer


def _bf16_bits(a32):
    """float32 -> bfloat16 bit patterns (round to nearest even), as uint16."""
    u = np.ascontiguousarray(a32, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16_bits(u16):
    return (np.asarray(u16, dtype=np.uint32) << 16).view(np.float32)


def run_smoke(args):
    """Small odd-sized problems that reach every (TJ, TK) tile shape of both layouts and all
    three dtypes, outputs poisoned beforehand, checked against float64; exit status 1 on any
    mismatch.  CuPy only (bfloat16 as raw bits), so it is quick under compute-sanitizer."""
    import cupy as cp

    from kronlinalg import structured
    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    rng = np.random.default_rng(args.seed)
    codes = {"float32": 0, "float16": 2, "bfloat16": 3}
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
    stream = cp.cuda.get_current_stream().ptr
    bad = runs = 0
    # d reaches TJ = 1, 2, 4, 8, 16 (and padded j: 3, 6, 12, 24); b reaches TK = 16 .. 128
    pats = [(1, 48, 19, 1), (2, 130, 7, 1), (1, 5, 33, 2), (3, 64, 9, 3), (1, 40, 17, 4),
            (2, 17, 5, 6), (1, 33, 12, 8), (2, 9, 21, 12), (1, 20, 11, 16), (1, 70, 6, 24),
            (1, 3, 40, 17), (4, 2, 2, 32), (1, 256, 10, 1)]
    for p in pats:
        a, b, c, d = p
        n, m = a * c * d, a * b * d
        for dtype in ("float32", "float16", "bfloat16"):
            for layout in (0, 1):
                for batch in (37, 300):
                    v32 = rng.standard_normal(p).astype(np.float32)
                    x32 = rng.standard_normal((batch, n) if layout == 0 else (n, batch))
                    x32 = x32.astype(np.float32)
                    if dtype == "bfloat16":
                        vh, xh = _bf16_bits(v32), _bf16_bits(x32)
                        v64, x64 = (_from_bf16_bits(vh).astype(np.float64),
                                    _from_bf16_bits(xh).astype(np.float64))
                        y = cp.full((batch, m) if layout == 0 else (m, batch), 0xFFFF, cp.uint16)
                    else:
                        vh, xh = v32.astype(dtype), x32.astype(dtype)
                        v64, x64 = vh.astype(np.float64), xh.astype(np.float64)
                        y = cp.full((batch, m) if layout == 0 else (m, batch), np.nan, dtype)
                    vd, xd = cp.asarray(vh), cp.asarray(xh)
                    ks_cuda.matmul(p, batch, layout, (vd.data.ptr, b * c * d, c * d, d, 1),
                                   (xd.data.ptr, xd.shape[1]), (y.data.ptr, y.shape[1]),
                                   codes[dtype], stream)
                    got = cp.asnumpy(y)
                    got = (_from_bf16_bits(got) if dtype == "bfloat16" else got).astype(np.float64)
                    w = structured.KSFactor(p, v64).to_dense()
                    ref = x64 @ w.T if layout == 0 else w @ x64
                    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                    runs += 1
                    if not (np.all(np.isfinite(got)) and err < tol[dtype]):
                        bad += 1
                        print(f"FAIL {p} {dtype} layout={layout} B={batch} rel={err:.2e}")
    # and through the library: a chain, strided x, both layouts
    chain = structured.KSChain.random([(1, 192, 48, 2), (2, 48, 192, 1)], rng=1, xp=cp,
                                      dtype="float32")
    xs = cp.asarray(rng.standard_normal((70, 2 * 384)), dtype=cp.float32)[:, ::2]
    for layout, x in (("batch_first", xs), ("batch_last", cp.ascontiguousarray(xs.T))):
        y = structured.structured_matmul(x, chain, layout=layout, algorithm="kernel")
        w = cp.asnumpy(chain.to_dense()).astype(np.float64)
        xn = cp.asnumpy(x).astype(np.float64)
        ref = xn @ w.T if layout == "batch_first" else w @ xn
        err = np.linalg.norm(cp.asnumpy(y) - ref) / np.linalg.norm(ref)
        runs += 1
        if not err < 1e-5:
            bad += 1
            print(f"FAIL library chain {layout} rel={err:.2e}")
    cp.cuda.Device().synchronize()
    print(f"smoke: {runs} kernel runs, {bad} failures")
    if bad:
        raise SystemExit(1)
    return {"runs": runs, "failures": bad}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--patterns", type=int, default=None, help="default: 30 (cpu), 120 (gpu)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=None, help="default: 2048 (cpu), 25088 (gpu)")
    ap.add_argument("--max-dim", type=int, default=None,
                    help="largest a·b·d and a·c·d sampled (default 8192 gpu, 4096 cpu)")
    ap.add_argument("--reps", type=int, default=None, help="default: 10 (gpu), 3 (cpu)")
    ap.add_argument("--dtypes", default="float32,float16,bfloat16", help="GPU dtypes")
    ap.add_argument("--max-dense-bytes", type=float, default=4e9)
    ap.add_argument("--cases", default=CASES)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--timer", choices=("device", "call"), default="device",
                    help="GPU: device time (host time before the launches hidden, default), or "
                         "each call's time from an idle device (host time included)")
    ap.add_argument("--no-tune", dest="tune", action="store_false",
                    help="GPU: skip the measured planning (structured.tune) per pattern")
    ap.add_argument("--smoke", action="store_true",
                    help="GPU: run every CUDA tile shape once on small problems (for "
                         "compute-sanitizer) instead of the benchmark")
    args = ap.parse_args(argv)
    if args.smoke:
        return run_smoke(args)
    ks = load_cases(args.cases)
    if args.max_dim is None:
        args.max_dim = 8192 if args.device == "gpu" else 4096
    if args.reps is None:
        args.reps = 10 if args.device == "gpu" else 3
    res = run_gpu(args, ks) if args.device == "gpu" else run_cpu(args, ks)
    res["command"] = " ".join([os.path.basename(sys.executable)] + sys.argv)
    if args.device == "gpu":  # the GEMM algorithms the packed calls tuned (kronlinalg._cublaslt)
        from kronlinalg.vendor import cublaslt

        res["gemm_tuning"] = cublaslt.summary()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(res, fh, indent=1, default=str)
    return res


if __name__ == "__main__":
    main()
