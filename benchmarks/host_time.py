"""Host time per call of a repeated signature (the per-signature fast path), auto against the
forced algorithm it picks, and against the array library's own reshape-matmul-transpose:
kron_matmul and structured_matmul on tiny problems (host-bound: the kernels run for a few µs).

    python benchmarks/host_time.py [--device cpu|cuda] [--out DIR]

Each row: the median over 9 rounds of the mean host time of 300 back-to-back calls (CUDA: the
device idle at the start of a round, no synchronisation inside it: the time the caller's
thread spends in the call, not the kernels'); auto_cpu_us, the same rounds' median of the
thread's CPU time per call.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def per_call(fn, sync, n=300, rounds=9, cpu=None):
    """Host time per call: n calls back to back (fewer launches than a GPU's queue holds, so
    the host never waits for the device), timed without synchronising; (median, best) of
    rounds, each started on an idle device.  The best round is what the call costs when the
    shared host's other tenants leave it alone (the medians of two H100 hosts differed 1.5×).
    cpu: a list that receives the median of the calling thread's CPU time per call (the wall
    time less what the OS gave other tenants: a shared host's steal and preemption)."""
    for _ in range(50):
        fn()
    out, thread = [], []
    for _ in range(rounds):
        sync()
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(n):
            fn()
        thread.append((time.thread_time() - c0) / n * 1e6)
        out.append((time.perf_counter() - t0) / n * 1e6)
    sync()
    if cpu is not None:
        cpu.append(float(np.median(thread)))
    return float(np.median(out)), float(min(out))


def per_call_us(fn, sync, n=300, rounds=9):
    """per_call's median."""
    return per_call(fn, sync, n, rounds)[0]


def shuffle(xp, x, fs):
    """What NumPy/CuPy users write: reshape-matmul-transpose per factor (GPyTorch's way)."""
    m = x.shape[0]
    cur = x
    for f in reversed(fs):
        p, q = f.shape
        s = cur.shape[1] // p
        t = cur.reshape(m * s, p) @ f
        cur = t.reshape(m, s, q).transpose(0, 2, 1).reshape(m, q * s)
    return cur


def cases(lib, device):
    import kronlinalg
    from kronlinalg.structured import KSChain

    rng = np.random.default_rng(0)
    if lib == "numpy":
        xp, conv, sync = np, np.asarray, lambda: None
    elif lib == "cupy":
        import cupy as xp
        conv, sync = xp.asarray, xp.cuda.get_current_stream().synchronize
    else:
        import torch as xp
        conv = lambda a: xp.as_tensor(a, device="cuda")  # noqa: E731
        sync = xp.cuda.synchronize
    rows = []
    for name, m, shapes in (("1x5^4", 1, [(5, 5)] * 4), ("8x8^3", 8, [(8, 8)] * 3),
                            ("8x16^2", 8, [(16, 16)] * 2)):
        for dt in ("float32", "float64"):
            x = conv(rng.standard_normal((m, int(np.prod([p for p, _ in shapes])))).astype(dt))
            fs = [conv(rng.standard_normal(s).astype(dt)) for s in shapes]
            auto = kronlinalg.plan("kron_matmul", tuple(x.shape), *shapes, dtype=dt,
                                   device=x)[0].name
            row = {"op": "kron_matmul", "case": name, "dtype": dt, "lib": lib, "auto_picks": auto}
            cpu = []
            row["auto_us"], row["auto_best_us"] = per_call(
                lambda: kronlinalg.kron_matmul(x, fs), sync, cpu=cpu)
            row["auto_cpu_us"] = cpu[0]
            row["forced_us"] = per_call_us(
                lambda: kronlinalg.kron_matmul(x, fs, algorithm=auto), sync)
            row["sliced_us"] = per_call_us(
                lambda: kronlinalg.kron_matmul(x, fs, algorithm="sliced"), sync)
            if lib != "torch":
                row["library_shuffle_us"] = per_call_us(lambda: shuffle(xp, x, fs), sync)
            rows.append(row)
    if lib != "numpy":  # the host's yardstick, same run: one elementwise kernel of the library
        x = conv(rng.standard_normal((8, 512)).astype("float32"))
        cpu = []
        rows.append({"op": "x + 0 (one library kernel)", "case": "8x512", "dtype": "float32",
                     "lib": lib, **dict(zip(("auto_us", "auto_best_us"),
                                            per_call(lambda: x + 0, sync, cpu=cpu))),
                     "auto_cpu_us": cpu[0]})
        chain = KSChain.random([(2, 16, 16, 4)], rng=1, xp=xp if lib == "cupy" else None,
                               dtype="float32")
        if lib == "torch":
            chain = KSChain([type(chain[0])(f.pattern, conv(np.asarray(f.values)))
                             for f in chain])
        x = conv(rng.standard_normal((64, 128)).astype("float32"))
        auto = kronlinalg.plan("structured_matmul", tuple(x.shape), *chain.patterns,
                               dtype="float32", device=x)[0].name
        row = {"op": "structured_matmul", "case": "64x(2,16,16,4)", "dtype": "float32",
               "lib": lib, "auto_picks": auto}
        cpu = []
        row["auto_us"], row["auto_best_us"] = per_call(
            lambda: kronlinalg.structured_matmul(x, chain), sync, cpu=cpu)
        row["auto_cpu_us"] = cpu[0]
        row["forced_us"] = per_call_us(
            lambda: kronlinalg.structured_matmul(x, chain, algorithm=auto), sync)
        row["kernel_us"] = per_call_us(
            lambda: kronlinalg.structured_matmul(x, chain, algorithm="kernel"), sync)
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    libs = ["numpy"] if args.device == "cpu" else ["cupy", "torch"]
    rows = []
    for lib in libs:
        try:
            rows += cases(lib, args.device)
        except ImportError as exc:
            print(f"{lib}: skipped ({exc})")
    keys = ["op", "case", "dtype", "lib", "auto_picks", "auto_us", "auto_best_us", "auto_cpu_us",
            "forced_us",
            "sliced_us", "kernel_us", "library_shuffle_us"]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[k]:.1f}" if isinstance(r.get(k), float)
                                       else str(r.get(k, "")) for k in keys) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(f"{args.out}/host_time_{args.device}.json", "w") as fh:
            json.dump(rows, fh, indent=1)
        with open(f"{args.out}/host_time_{args.device}.md", "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
