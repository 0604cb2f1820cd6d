"""Bandwidth of the strided algorithm's planar copies (split: x rows (a, c, d) -> (a, d, B, c);
merge: (a, d, B, b) -> y rows (a, b, d)) against a plain device copy of the same bytes, at the
structured benchmark's batch (25088), for the half types and float32.  GPU only.

    python benchmarks/ks_planar_bw.py
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from structured_compare import _gpu_timer  # noqa: E402

PATTERNS = [(1, 1024, 256, 4), (1, 512, 128, 8), (1, 256, 256, 6), (1, 192, 192, 6),
            (1, 96, 384, 8), (1, 64, 256, 12), (1, 128, 512, 6), (1, 256, 64, 8),
            (1, 128, 512, 3), (1, 256, 256, 2), (2, 64, 64, 16), (1, 48, 48, 24)]


def main(B=25088):
    import cupy as cp

    from kronlinalg.testing import extension
    ks_cuda = extension("structured_cuda")

    timeit = _gpu_timer(cp, reps=10)
    stream = cp.cuda.get_current_stream().ptr
    for dtype, code in (("float16", 2), ("float32", 0)):
        for a, b, c, d in PATTERNS:
            for split, n in ((True, c), (False, b)):
                inter = cp.random.standard_normal((B, a * n * d)).astype(dtype)
                planar = cp.empty(a * d * B * n, dtype=dtype)
                src, dst = (inter, planar) if split else (planar, inter)

                def run(src=src, dst=dst, split=split, n=n):
                    ks_cuda.planar(split, B, a, n, d, src.data.ptr, dst.data.ptr,
                                   a * n * d, code, stream)

                t = timeit(run)
                flat = cp.empty_like(planar)
                t_copy = timeit(lambda: flat.__setitem__(Ellipsis, planar))
                nbytes = 2 * planar.nbytes
                print(f"{str((a, b, c, d)):18s} {dtype:8s} {'split' if split else 'merge'} "
                      f"{nbytes / 1e6:7.1f} MB {t:.4f} ms {nbytes / t / 1e9:.2f} TB/s "
                      f"(copy {nbytes / t_copy / 1e9:.2f} TB/s)", flush=True)


if __name__ == "__main__":
    main()
