"""Where a repeated tiny kron_matmul call's host time goes on CUDA (CuPy and torch): the whole
call, its parts timed alone, and a cProfile of the hot path.

    python benchmarks/host_profile.py
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import numpy as np


def per_call_us(fn, n=300, rounds=9, sync=None):
    """Host time per call: n calls back to back (fewer than the launch queue holds), timed
    without waiting for the GPU; the median of rounds."""
    out = []
    for _ in range(rounds):
        if sync:
            sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    if sync:
        sync()
    return float(np.median(out))


def main():
    import cupy as cp

    import kronlinalg

    rng = np.random.default_rng(0)
    sync = cp.cuda.get_current_stream().synchronize
    x = cp.asarray(rng.standard_normal((8, 512)), dtype=cp.float32)
    fs = [cp.asarray(rng.standard_normal((8, 8)), dtype=cp.float32) for _ in range(3)]
    kronlinalg.kron_matmul(x, fs)
    rows = {
        "kron_matmul auto (cupy)": lambda: kronlinalg.kron_matmul(x, fs),
        "kron_matmul sliced (cupy)": lambda: kronlinalg.kron_matmul(x, fs, algorithm="sliced"),
        "cupy.empty((8, 512))": lambda: cp.empty((8, 512), dtype="float32"),
        "cupy.cuda.runtime.getDevice()": cp.cuda.runtime.getDevice,
        "get_current_stream().ptr": lambda: cp.cuda.get_current_stream().ptr,
        "x + 0 (one CuPy kernel)": lambda: x + 0,
    }
    for name, fn in rows.items():
        print(f"{name:34s} {per_call_us(fn, sync=sync):8.2f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3000):
        kronlinalg.kron_matmul(x, fs)
        if _ % 300 == 0:
            sync()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
    print(s.getvalue())
    try:
        import torch
    except ImportError:
        return
    xt = torch.as_tensor(cp.asnumpy(x), device="cuda")
    ft = [torch.as_tensor(cp.asnumpy(f), device="cuda") for f in fs]
    kronlinalg.kron_matmul(xt, ft)
    tsync = torch.cuda.synchronize
    from kronlinalg.structured import KSChain, KSFactor

    chain = KSChain([KSFactor((2, 16, 16, 4), torch.randn((2, 16, 16, 4), device="cuda"))])
    xs = torch.randn((64, 128), device="cuda")
    kronlinalg.structured_matmul(xs, chain)
    for name, fn in {"kron_matmul auto (torch)": lambda: kronlinalg.kron_matmul(xt, ft),
                     "structured_matmul auto (torch)": lambda: kronlinalg.structured_matmul(xs, chain),
                     "torch.empty((8, 512))": lambda: torch.empty((8, 512), device="cuda"),
                     "xt.new_empty((8, 512))": lambda: xt.new_empty((8, 512)),
                     "torch.empty_like(xt)": lambda: torch.empty_like(xt),
                     "xt.data_ptr()": xt.data_ptr,
                     "torch._C._cuda_getCurrentRawStream(0)":
                         lambda: torch._C._cuda_getCurrentRawStream(0),
                     "xt + 0 (one torch kernel)": lambda: xt + 0}.items():
        print(f"{name:34s} {per_call_us(fn, sync=tsync):8.2f} us")
    for label, fn in (("kron_matmul torch", lambda: kronlinalg.kron_matmul(xt, ft)),
                      ("structured_matmul torch", lambda: kronlinalg.structured_matmul(xs, chain))):
        prof = cProfile.Profile()
        prof.enable()
        for i in range(3000):
            fn()
            if i % 300 == 0:
                tsync()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
        print(label, s.getvalue())


if __name__ == "__main__":
    main()
