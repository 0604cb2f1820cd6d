"""batched_matmul on the GPU against torch.bmm (cuBLAS strided-batched), issue 33's table.

    python benchmarks/batched_gpu.py --out batched.json [--quick]

Cases (every time is a median of >= 10 CUDA-event measurements of a warm loop of calls, so a
host-bound call shows its host time): batch 10⁴ x n in {16, 32, 64, 128, 256} x {float64,
float32, float16, bfloat16}; batch 10³ x n in {16, 32, 64}; low rank (m = n = 128, k in {16,
32}, batch 10⁴); variable sizes (10⁴ square products of orders uniform in 8..256, packed, the
size table on the GPU) against padding to the largest order + bmm, bucketing by order (buckets
of 16) + bmm, and torch's grouped_mm where it runs.  TB/s counts A + B + D bytes once (the
actual bytes for variable sizes); the fraction is of the 2.96 TB/s copy bandwidth.  Each
case also checks our result against a float64 reference on a few products.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys

import numpy as np
import torch

import kronlinalg

COPY_BW = 2.96e12
DT = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
      "bfloat16": torch.bfloat16}
SE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


@contextlib.contextmanager
def env_scope(settings):
    """The environment with `settings` (name: value) inside the block, restored after it (the
    C++ launchers read their KRONLINALG_* knobs at every launch)."""
    old = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def timed(fn, reps=12, inner=None):
    """Median seconds per call over `reps` event-timed loops of `inner` calls (warm)."""
    fn()
    torch.cuda.synchronize()
    if inner is None:  # about 2 ms a loop
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        inner = max(1, min(200, int(2.0 / max(s.elapsed_time(e), 1e-3))))
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3 / inner)
    return statistics.median(times)


AB = {"on": False, "from": []}  # --ab: half types and float32 also timed on the small tiles
# alone (A/B); --large-from 64,128: and with the 128 x 128 tiles from those orders


def small_tiles_only(fn, value="0"):
    """fn() with the 128 x 128 kernel and its 64 x 64 tiles off (KRONLINALG_BATCHED_LARGE=0 and
    _MID=0: the C++ launcher reads them at every launch), or the 128 x 128 tiles from another
    order (value)."""
    names = ("KRONLINALG_BATCHED_LARGE",) + (("KRONLINALG_BATCHED_MID",) if value == "0" else ())
    old = {k: os.environ.get(k) for k in names}
    for k in names:
        os.environ[k] = value
    try:
        return fn()
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def brief(row):
    """One short line per case (the full rows go to the JSON file)."""
    keys = ("torch_bmm_us", "pad_bmm_us", "bucket_bmm_us", "auto_us", "kami1d_us", "kami2d_us",
            "small_tiles_us", "synchronous_us", "auto_err", "kami1d_err", "small_tiles_err")
    keys = keys + tuple(k for k in row if k.startswith("large_from_"))
    parts = [f"{k}={row[k]:.3g}" for k in keys if isinstance(row.get(k), float)]
    errs = [f"{k}={row[k][:80]}" for k in row if k.endswith("_error")]
    print(row["case"], row.get("dtype"), row.get("n", row.get("orders")), row.get("k", ""),
          " ".join(parts + errs), flush=True)


def rel_err(out, ref):
    out = out.double()
    return float(torch.linalg.norm(out - ref) / max(torch.linalg.norm(ref), 1e-300))


def stack_inputs(dtype, batch, m, n, k):
    """A stack of batch products m x k by k x n (seed 0), its A + B + D bytes, and the float64
    reference of its first 8 products."""
    torch.manual_seed(0)
    dt = DT[dtype]
    a = torch.randn(batch, m, k, device="cuda").to(dt)
    b = torch.randn(batch, k, n, device="cuda").to(dt)
    nbytes = batch * (m * k + k * n + m * n) * SE[dtype]
    return a, b, nbytes, torch.bmm(a[:8].double(), b[:8].double())


def uniform_case(dtype, batch, m, n, k, rows, label):
    a, b, nbytes, ref = stack_inputs(dtype, batch, m, n, k)
    row = {"case": label, "dtype": dtype, "batch": batch, "m": m, "n": n, "k": k,
           "bytes": nbytes}
    t_bmm = timed(lambda: torch.bmm(a, b))
    row["torch_bmm_us"] = t_bmm * 1e6
    plan = kronlinalg.plan("batched_matmul", tuple(a.shape), tuple(b.shape), dtype=dtype,
                           device=a)
    row["planned"] = plan[0].name
    row["predicted_us"] = {ch.name: ch.seconds * 1e6 for ch in plan}
    for algo in ("auto", "kami1d", "kami2d"):
        try:
            out = kronlinalg.batched_matmul(a, b, algorithm=algo)
            t = timed(lambda: kronlinalg.batched_matmul(a, b, algorithm=algo))
            row[f"{algo}_us"] = t * 1e6
            row[f"{algo}_err"] = rel_err(out[:8], ref)
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            row[f"{algo}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if AB["on"]:
        try:
            out = small_tiles_only(lambda: kronlinalg.batched_matmul(a, b, algorithm="kami1d"))
            row["small_tiles_us"] = small_tiles_only(
                lambda: timed(lambda: kronlinalg.batched_matmul(a, b, algorithm="kami1d"))) * 1e6
            row["small_tiles_err"] = rel_err(out[:8], ref)
            for v in AB["from"]:
                row[f"large_from_{v}_us"] = small_tiles_only(
                    lambda: timed(lambda: kronlinalg.batched_matmul(a, b, algorithm="kami1d")),
                    v) * 1e6
        except Exception as exc:  # noqa: BLE001
            row["small_tiles_error"] = f"{type(exc).__name__}: {exc}"[:300]
    best = min(row.get("kami1d_us", math.inf), row.get("kami2d_us", math.inf))
    row["ours_best_us"] = best
    row["ours_TBps"] = nbytes / (best * 1e-6) / 1e12 if best < math.inf else None
    row["ours_frac"] = row["ours_TBps"] * 1e12 / COPY_BW if row["ours_TBps"] else None
    row["bmm_TBps"] = nbytes / t_bmm / 1e12
    row["speedup_auto"] = t_bmm / (row.get("auto_us", math.inf) * 1e-6)
    rows.append(row)
    brief(row)
    del a, b
    torch.cuda.empty_cache()


def packed_error(out, a, b, orders, count=4):
    """The worst relative error of the first `count` square products of a packed result."""
    errs, off = [], 0
    for o in (int(v) for v in orders[:count]):
        ai = a[off:off + o * o].view(o, o).double()
        bi = b[off:off + o * o].view(o, o).double()
        errs.append(rel_err(out[off:off + o * o].view(o, o), ai @ bi))
        off += o * o
    return max(errs)


def packed_inputs(dtype, count, lo=8, hi=256, step=1):
    """`count` square products of orders uniform in lo..hi (multiples of step: step 8 aligns
    every operand), packed: (orders, a, b, the size table on the GPU, elements a buffer)."""
    rng = np.random.default_rng(1)
    orders = rng.integers(lo, hi + 1, count) // step * step
    dt = DT[dtype]
    sizes = np.stack([orders, orders, orders], axis=1).astype(np.int64)
    na = int((orders ** 2).sum())
    a = torch.randn(na, device="cuda").to(dt)
    b = torch.randn(na, device="cuda").to(dt)
    return orders, a, b, torch.from_numpy(sizes).cuda(), na


def variable_case(dtype, count, rows, lo=8, hi=256, step=1):
    orders, a, b, dsizes, na = packed_inputs(dtype, count, lo, hi, step)
    dt = DT[dtype]
    nbytes = 3 * na * SE[dtype]
    row = {"case": "variable", "dtype": dtype, "count": count,
           "orders": f"{lo}..{hi}" + (f" step {step}" if step > 1 else ""), "bytes": nbytes}
    # ours: the packed form, sizes on the device, out_size known (no synchronisation)
    for algo in ("auto", "kami1d", "kami2d"):
        try:
            out = kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na, algorithm=algo)
            t = timed(lambda: kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na,
                                                        algorithm=algo))
            row[f"{algo}_us"] = t * 1e6
            row[f"{algo}_err"] = packed_error(out, a, b, orders)
        except Exception as exc:  # noqa: BLE001
            row[f"{algo}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if AB["on"]:
        def small():
            return kronlinalg.batched_matmul(a, b, sizes=dsizes, out_size=na, algorithm="kami1d")
        try:
            row["small_tiles_us"] = small_tiles_only(lambda: timed(small)) * 1e6
            os.environ["KRONLINALG_BATCHED_STAGING"] = "0"  # unaligned rows loaded synchronously
            try:
                row["synchronous_us"] = timed(small) * 1e6
            finally:
                del os.environ["KRONLINALG_BATCHED_STAGING"]
            for v in AB["from"]:
                row[f"large_from_{v}_us"] = small_tiles_only(lambda: timed(small), v) * 1e6
        except Exception as exc:  # noqa: BLE001
            row["small_tiles_error"] = f"{type(exc).__name__}: {exc}"[:300]
    # padding to the largest order + bmm (the padded buffers are made untimed: favourable)
    try:
        pa = torch.zeros(count, hi, hi, device="cuda", dtype=dt)
        pb = torch.zeros(count, hi, hi, device="cuda", dtype=dt)
        row["pad_bmm_us"] = timed(lambda: torch.bmm(pa, pb), reps=10) * 1e6
        del pa, pb
    except Exception as exc:  # noqa: BLE001
        row["pad_bmm_error"] = str(exc)[:200]
    torch.cuda.empty_cache()
    # bucketing by order (width 16) + one bmm per bucket, buckets made untimed
    buckets = []
    for top in range(lo + 15, hi + 16, 16):
        cnt = int(((orders <= top) & (orders > top - 16)).sum())
        if cnt:
            buckets.append((torch.zeros(cnt, top, top, device="cuda", dtype=dt),
                            torch.zeros(cnt, top, top, device="cuda", dtype=dt)))
    row["bucket_bmm_us"] = timed(lambda: [torch.bmm(x, y) for x, y in buckets], reps=10) * 1e6
    del buckets
    torch.cuda.empty_cache()
    gm = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    if gm is None:
        row["grouped_mm"] = "not in this torch"
    else:
        try:
            x = torch.randn(count * 16, 64, device="cuda").to(dt)
            w = torch.randn(count, 64, 64, device="cuda").to(dt)
            offs = torch.arange(16, count * 16 + 1, 16, device="cuda", dtype=torch.int32)
            gm(x, w, offs=offs)
            row["grouped_mm"] = "ran (different problem shape; not comparable)"
        except Exception as exc:  # noqa: BLE001
            row["grouped_mm"] = f"refused: {type(exc).__name__}: {str(exc)[:160]}"
    best = min(row.get("kami1d_us", math.inf), row.get("kami2d_us", math.inf),
               row.get("auto_us", math.inf))
    row["ours_TBps"] = nbytes / (best * 1e-6) / 1e12 if best < math.inf else None
    row["ours_frac"] = row["ours_TBps"] * 1e12 / COPY_BW if row["ours_TBps"] else None
    base = min(row.get("pad_bmm_us", math.inf), row.get("bucket_bmm_us", math.inf))
    row["speedup_vs_best_baseline"] = base / best if best < math.inf else None
    rows.append(row)
    brief(row)


def fp32_error(rows):
    """3xTF32 against IEEE float32: the error of each against a float64 reference (order 64:
    the 64 x 64 tiles of the large-tile kernel; 256: its 128 x 128 tiles)."""
    for n, batch in ((64, 200), (256, 20)):
        torch.manual_seed(1)
        a = torch.randn(batch, n, n, device="cuda")
        b = torch.randn(batch, n, n, device="cuda")
        ref = torch.bmm(a.double(), b.double())
        prev = kronlinalg.batched.float32_precision("tf32x3")
        e3 = rel_err(kronlinalg.batched_matmul(a, b, algorithm="kami1d"), ref)
        kronlinalg.batched.float32_precision("ieee")
        ei = rel_err(kronlinalg.batched_matmul(a, b, algorithm="kami1d"), ref)
        kronlinalg.batched.float32_precision(prev)
        torch.backends.cuda.matmul.allow_tf32 = False
        eb = rel_err(torch.bmm(a, b), ref)
        row = {"case": "fp32-error", "n": n, "tf32x3_err": e3, "ieee_kernel_err": ei,
               "torch_ieee_err": eb, "ratio_tf32x3_to_ieee": e3 / eb}
        rows.append(row)
        print(json.dumps(row), flush=True)


def table(rows) -> str:
    lines = ["| case | dtype | batch | m×k×n | torch.bmm µs (TB/s) | ours µs (TB/s, of 2.96) | "
             "auto / bmm | planned | max rel. err |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["case"] == "fp32-error":
            continue
        if r["case"] == "variable":
            best = min(r.get("auto_us", math.inf), r.get("kami1d_us", math.inf),
                       r.get("kami2d_us", math.inf))
            base = min(r.get("pad_bmm_us", math.inf), r.get("bucket_bmm_us", math.inf))
            err = max([r.get(f"{x}_err", 0) for x in ("auto", "kami1d", "kami2d")])
            lines.append(
                f"| variable | {r['dtype']} | {r['count']} | {r['orders']} | pad {r.get('pad_bmm_us', float('nan')):.0f}"
                f" / bucket {r.get('bucket_bmm_us', float('nan')):.0f} | {best:.0f} "
                f"({(r['ours_TBps'] or 0):.2f}, {(r['ours_frac'] or 0):.2f}) | "
                f"{base / best:.2f}x best baseline | - | {err:.1e} |")
            continue
        err = max([r.get(f"{x}_err", 0) for x in ("auto", "kami1d", "kami2d")])
        lines.append(
            f"| {r['case']} | {r['dtype']} | {r['batch']} | {r['m']}×{r['k']}×{r['n']} | "
            f"{r['torch_bmm_us']:.1f} ({r['bmm_TBps']:.2f}) | {r['ours_best_us']:.1f} "
            f"({(r['ours_TBps'] or 0):.2f}, {(r['ours_frac'] or 0):.2f}) | "
            f"{r['speedup_auto']:.2f} | {r['planned']} | {err:.1e} |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="batched_gpu.json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ab", action="store_true",
                    help="float16/bfloat16/float32: also time the small tiles alone (small_tiles_us)")
    ap.add_argument("--dtypes", default="float64,float32,float16,bfloat16")
    ap.add_argument("--large-from", default="",
                    help="with --ab: also time the 128 x 128 tiles from these orders (64,128)")
    ap.add_argument("--only", default="small,b1e3,fp32err,lowrank,variable,large",
                    help="comma-separated groups: small (batch 1e4, n <= 64), b1e3, fp32err, "
                         "lowrank, variable, variable8 (orders multiples of 8), large (n 128, 256)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    rows: list = []
    print(torch.cuda.get_device_name(), torch.__version__, file=sys.stderr)
    dtypes = tuple(args.dtypes.split(","))
    AB["on"] = args.ab
    AB["from"] = [v for v in args.large_from.split(",") if v]

    def save():  # after every case: a run cut short still leaves its rows
        with open(args.out, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)

    for dtype in dtypes if "small" in only else ():
        for n in (16, 32, 64):
            uniform_case(dtype, 10_000, n, n, n, rows, "batch 1e4")
        save()
    for dtype in dtypes if "b1e3" in only else ():
        for n in (16, 32, 64):
            uniform_case(dtype, 1_000, n, n, n, rows, "batch 1e3")
    save()
    try:
        if "fp32err" in only:
            fp32_error(rows)
    except Exception as exc:  # noqa: BLE001
        print("fp32 error case failed:", exc, file=sys.stderr)
    for dtype in [d for d in dtypes if d != "bfloat16"] if "lowrank" in only else ():
        for k in (16, 32):
            uniform_case(dtype, 10_000, 128, 128, k, rows, "low rank")
    save()
    if "large64" in only:  # order 64 next to the large orders (the "large" group: 128, 256)
        for dtype in dtypes:
            uniform_case(dtype, 10_000, 64, 64, 64, rows, "batch 1e4")
        save()
    for step in [s for s in (1, 8) if ("variable" if s == 1 else "variable8") in only]:
        for dtype in dtypes:
            try:
                variable_case(dtype, 10_000 if not args.quick else 2_000, rows, step=step)
            except Exception as exc:  # noqa: BLE001
                print("variable case failed:", dtype, exc, file=sys.stderr)
            save()
    if not args.quick and "large" in only:
        for dtype in dtypes:
            for n in (128, 256):
                uniform_case(dtype, 10_000, n, n, n, rows, "batch 1e4")
            save()
    md = table(rows)
    print(md)
    with open(args.out, "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows, "table": md}, fh,
                  indent=1)
    with open(args.out.rsplit(".", 1)[0] + ".md", "w") as fh:
        fh.write(md + "\n")
