"""Host time per call of a repeated signature (the per-signature fast path), auto against the
forced algorithm it picks, and against the array library's own reshape-matmul-transpose:
kron_matmul and structured_matmul on tiny problems (host-bound: the kernels run for a few µs).

    python benchmarks/host_time.py [--device cpu|cuda] [--out DIR] [--rounds 15]

Each figure: the median over 15 rounds of the mean host time of 300 back-to-back calls (CUDA:
the device idle at the start of a round, no synchronisation inside it: the time the caller's
thread spends in the call, not the kernels'), every call of the table timed once per round
(Interleaved).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


class Interleaved:
    """Host time per call of several calls, measured in turns: each round times every call
    once — n calls back to back (fewer launches than a GPU's queue holds, so the host never
    waits for the device), without synchronising, each started on an idle device — and a
    call's figure is the median over the rounds (its best round beside it where asked).  A
    shared host's slow spells (its other tenants: the same build timed 1.3-1.8x apart minutes
    later) then fall on every row of a round alike, and the median drops them, where rows timed
    one after the other took a spell each."""

    def __init__(self, n=300, rounds=15):
        self.n, self.rounds, self.jobs = n, rounds, []

    def add(self, row, key, fn, sync, best_key=None):
        self.jobs.append((row, key, best_key, fn, sync, []))

    def run(self):
        for job in self.jobs:
            for _ in range(50):
                job[3]()
            job[4]()
        for _ in range(self.rounds):
            for row, key, best_key, fn, sync, times in self.jobs:
                sync()
                t0 = time.perf_counter()
                for _ in range(self.n):
                    fn()
                times.append((time.perf_counter() - t0) / self.n * 1e6)
        for row, key, best_key, fn, sync, times in self.jobs:
            sync()
            row[key] = float(np.median(times))
            if best_key:
                row[best_key] = float(min(times))


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


def cases(lib, timer):
    """The rows of one library, their calls added to timer (an Interleaved, run by the
    caller)."""
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
            timer.add(row, "auto_us", lambda x=x, fs=fs: kronlinalg.kron_matmul(x, fs), sync,
                      "auto_best_us")
            timer.add(row, "forced_us",
                      lambda x=x, fs=fs, a=auto: kronlinalg.kron_matmul(x, fs, algorithm=a), sync)
            timer.add(row, "sliced_us",
                      lambda x=x, fs=fs: kronlinalg.kron_matmul(x, fs, algorithm="sliced"), sync)
            if lib != "torch":
                timer.add(row, "library_shuffle_us", lambda x=x, fs=fs: shuffle(xp, x, fs), sync)
            rows.append(row)
    if lib != "numpy":  # the host's yardstick, same run: one elementwise kernel of the library
        x8 = conv(rng.standard_normal((8, 512)).astype("float32"))
        row = {"op": "x + 0 (one library kernel)", "case": "8x512", "dtype": "float32",
               "lib": lib}
        timer.add(row, "auto_us", lambda: x8 + 0, sync, "auto_best_us")
        rows.append(row)
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
        timer.add(row, "auto_us", lambda: kronlinalg.structured_matmul(x, chain), sync,
                  "auto_best_us")
        timer.add(row, "forced_us",
                  lambda: kronlinalg.structured_matmul(x, chain, algorithm=auto), sync)
        timer.add(row, "kernel_us",
                  lambda: kronlinalg.structured_matmul(x, chain, algorithm="kernel"), sync)
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    libs = ["numpy"] if args.device == "cpu" else ["cupy", "torch"]
    rows, timer = [], Interleaved(rounds=args.rounds)
    for lib in libs:
        try:
            rows += cases(lib, timer)
        except ImportError as exc:
            print(f"{lib}: skipped ({exc})")
    timer.run()
    keys = ["op", "case", "dtype", "lib", "auto_picks", "auto_us", "auto_best_us", "forced_us",
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
