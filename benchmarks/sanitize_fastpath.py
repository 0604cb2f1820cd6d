"""A small workload for compute-sanitizer over the paths this refactor changed: kron_matmul's
fast-path replays with kept scratch (several calls of one signature, both alignments), left
products of a tall row-major x (the result laid out like x), structured_matmul replays, on
CuPy and torch.

    compute-sanitizer --tool memcheck python benchmarks/sanitize_fastpath.py
"""

from __future__ import annotations

import numpy as np


def main():
    import cupy as cp
    import torch

    import kronlinalg
    from kronlinalg.structured import KSChain

    rng = np.random.default_rng(0)
    for lib in ("cupy", "torch"):
        conv = cp.asarray if lib == "cupy" else (lambda a: torch.as_tensor(a, device="cuda"))
        for dt in ("float32", "float64"):
            for shapes, m in [([(8, 8)] * 3, 5), ([(3, 5), (7, 2), (4, 4)], 7), ([(16, 16)] * 2, 33)]:
                fs = [conv(rng.standard_normal(s).astype(dt)) for s in shapes]
                k = int(np.prod([s[0] for s in shapes]))
                for _ in range(3):  # the full path, then replays with the kept scratch
                    x = conv(rng.standard_normal((m, k)).astype(dt))
                    kronlinalg.kron_matmul(x, fs)
                    kronlinalg.kron_matmul(x[:, :], fs, alpha=0.5)
            fs = [conv(rng.standard_normal((4, 4)).astype(dt)) for _ in range(3)]
            for _ in range(3):  # left products of a tall row-major x
                x = conv(rng.standard_normal((64, 3)).astype(dt))
                out = kronlinalg.kron_matmul(x, fs, side="left")
                assert tuple(out.shape) == (64, 3)
        chain = KSChain.random([(2, 16, 16, 4)], rng=rng, xp=cp if lib == "cupy" else None,
                               dtype="float32")
        if lib == "torch":
            chain = KSChain([type(f)(f.pattern, conv(np.asarray(f.values))) for f in chain])
        for _ in range(3):
            kronlinalg.structured_matmul(conv(rng.standard_normal((37, 128)).astype("float32")),
                                         chain)
    cp.cuda.Device().synchronize()
    torch.cuda.synchronize()
    print("sanitize_fastpath done")


if __name__ == "__main__":
    main()
