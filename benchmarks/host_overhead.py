"""Host time per kron_matmul call on tiny CUDA problems (the kron_small set is host-bound):
the whole call against its parts, plus a cProfile of the hot path; structured_matmul's kernel
and strided (cuBLAS) algorithms on a tiny batch likewise.

    python benchmarks/host_overhead.py            # CuPy and, if present, torch CUDA
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import numpy as np


def per_call_us(fn, n=3000):
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    import cupy as cp

    import kronlinalg

    rng = np.random.default_rng(0)
    shapes = [(8, 8)] * 3
    x = cp.asarray(rng.standard_normal((8, 512)), dtype=cp.float32)
    fs = [cp.asarray(rng.standard_normal(s), dtype=cp.float32) for s in shapes]
    rows = {
        "kron_matmul sliced": lambda: kronlinalg.kron_matmul(x, fs, algorithm="sliced"),
        "kron_matmul auto": lambda: kronlinalg.kron_matmul(x, fs),
        "kron_matmul shuffle": lambda: kronlinalg.kron_matmul(x, fs, algorithm="shuffle"),
        "cupy.empty": lambda: cp.empty((8, 512), dtype="float32"),
        "cupy matmul (8,512)@(512,?)": lambda: x[:, :8] @ fs[0],
        "get_current_stream().ptr": lambda: cp.cuda.get_current_stream().ptr,
        "x.device (enter/exit)": lambda: x.device.__enter__() and None,
        "array_namespace": lambda: kronlinalg._validation.namespace_of({"x": x}),
        "cupy.result_type x4": lambda: cp.result_type(x, *fs),
    }
    from kronlinalg.structured import KSChain

    chain = KSChain.random([(2, 16, 16, 4)], rng=rng, xp=cp, dtype=cp.float32)
    xs = cp.asarray(rng.standard_normal((64, 128)), dtype=cp.float32)
    for alg in ("kernel", "auto"):
        rows[f"structured_matmul {alg}"] = (
            lambda alg=alg: kronlinalg.structured_matmul(xs, chain, algorithm=alg))
    xl = cp.asarray(rng.standard_normal((128, 64)), dtype=cp.float32)  # batch_last: (a·c·d, B)
    for alg in ("kernel", "strided"):
        rows[f"structured_matmul batch_last {alg}"] = (
            lambda alg=alg: kronlinalg.structured_matmul(xl, chain, layout="batch_last",
                                                         algorithm=alg))
    for name, fn in rows.items():
        print(f"{name:34s} {per_call_us(fn):8.2f} us")
    cp.cuda.Device().synchronize()

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3000):
        kronlinalg.kron_matmul(x, fs, algorithm="sliced")
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    print(s.getvalue())

    try:
        import torch
    except ImportError:
        return
    xt = torch.as_tensor(cp.asnumpy(x), device="cuda")
    ft = [torch.as_tensor(cp.asnumpy(f), device="cuda") for f in fs]
    print(f"{'torch kron_matmul sliced':34s} "
          f"{per_call_us(lambda: kronlinalg.kron_matmul(xt, ft, algorithm='sliced')):8.2f} us")
    print(f"{'torch kron_matmul shuffle':34s} "
          f"{per_call_us(lambda: kronlinalg.kron_matmul(xt, ft, algorithm='shuffle')):8.2f} us")
    xlt = torch.as_tensor(cp.asnumpy(xl), device="cuda")
    chain_t = KSChain([type(f)(f.pattern, torch.as_tensor(cp.asnumpy(f.values), device="cuda"))
                       for f in chain])
    for alg in ("kernel", "strided"):
        fn = lambda alg=alg: kronlinalg.structured_matmul(  # noqa: E731
            xlt, chain_t, layout="batch_last", algorithm=alg)
        print(f"{'torch structured batch_last ' + alg:34s} {per_call_us(fn):8.2f} us")


if __name__ == "__main__":
    main()
