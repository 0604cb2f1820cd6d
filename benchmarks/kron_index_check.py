"""kron_matmul on the GPU where x and y hold more than 2^31 (and 2^32) elements: sampled rows
against a float64 reference on the host, and the time.  A kernel that indexes in 32 bits gives
wrong rows past the boundary (or faults); this says which.

    python benchmarks/kron_index_check.py [--rows 16777221] [--shape 16,16]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main():
    import cupy as cp

    import kronlinalg

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=(1 << 24) + 5)  # x: 2^32 + 1280 float32
    ap.add_argument("--shape", default="16,16")
    args = ap.parse_args()
    p = [int(v) for v in args.shape.split(",")]
    rng = np.random.default_rng(0)
    fs_h = [rng.standard_normal((q, q)).astype(np.float32) for q in p]
    fs = [cp.asarray(f) for f in fs_h]
    k = int(np.prod(p))
    x = cp.random.default_rng(1).standard_normal((args.rows, k), dtype=cp.float32)
    print(f"x: {args.rows} x {k} = {x.size} elements ({x.nbytes / 2**30:.1f} GiB)", flush=True)
    for algorithm in ("sliced", "auto"):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        y = kronlinalg.kron_matmul(x, fs, algorithm=algorithm)
        cp.cuda.Device().synchronize()
        dt = time.perf_counter() - t0
        picks = sorted({0, 1, args.rows // 2, (1 << 31) // k, (1 << 31) // k + 1,
                        (1 << 32) // k - 1, (1 << 32) // k, args.rows - 1} & set(range(args.rows)))
        picks += list(rng.integers(0, args.rows, 24))
        kron = fs_h[0].astype(np.float64)
        for f in fs_h[1:]:
            kron = np.kron(kron, f.astype(np.float64))
        xs = cp.asnumpy(x[picks]).astype(np.float64)
        ref = xs @ kron
        got = cp.asnumpy(y[picks]).astype(np.float64)
        err = np.abs(got - ref).max(axis=1) / np.abs(ref).max()
        worst = int(np.argmax(err))
        print(f"{algorithm}: {dt * 1e3:.1f} ms, max rel err {err.max():.2e} "
              f"(row {picks[worst]}), rows past 2^31 elements ok: "
              f"{bool((err[np.array(picks) * k >= (1 << 31)] < 1e-3).all())}", flush=True)
        del y


if __name__ == "__main__":
    main()
