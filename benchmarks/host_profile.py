"""Where a repeated tiny kron_matmul call's host time goes on CUDA (CuPy and torch), per case:
the CUDA plan (launches, grid), kernels per call as the torch profiler sees them, the whole call
against its parts timed alone (the array keys' attribute reads, allocation, pointers, stream),
and a cProfile of the hot path.

    python benchmarks/host_profile.py [--cases 1x5^4 8x8^3] [--cprofile] [--structured]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import numpy as np

from kronlinalg.testing import extension


def per_call_us(fn, n=300, rounds=9, sync=None):
    """Host time per call: n calls back to back (fewer than the launch queue holds), timed
    without waiting for the GPU; (median, best) of rounds."""
    for _ in range(30):
        fn()
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
    return float(np.median(out)), float(min(out))


def parse(case):
    m, rest = case.split("x")
    p, n = rest.split("^")
    return int(m), int(p), int(n)


def plan(m, p, n, dtype="float32"):
    kron_cuda = extension("kron_cuda")
    k = p ** n
    return kron_cuda.config(1, m, [(0, p, p, p, 1)] * n, (256, m * k, k, 1), (256, m * k, k, 1),
                            kron_cuda.DTYPES[dtype])


def show(rows, sync):
    for name, fn in rows.items():
        med, best = per_call_us(fn, sync=sync)
        print(f"  {name:44s} {med:7.2f} us  [best {best:6.2f}]")


def profile(fn, sync, label, top=14):
    prof = cProfile.Profile()
    prof.enable()
    for i in range(3000):
        fn()
        if i % 300 == 0:
            sync()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
    print(label, s.getvalue())


def kernels_per_call(torch, fn, calls=20):
    """CUDA kernels the torch profiler records per call, by name."""
    from torch.profiler import ProfilerActivity, profile as tprofile

    fn()
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    names = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            names[e.name[:60]] = names.get(e.name[:60], 0) + 1
    return {k: v / calls for k, v in names.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", nargs="*", default=["1x5^4", "8x8^3"])
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--structured", action="store_true",
                    help="also structured_matmul 64x(2,16,16,4), CuPy and torch, in parts")
    args = ap.parse_args()
    import cupy as cp
    import torch

    import kronlinalg

    rng = np.random.default_rng(0)
    csync = cp.cuda.get_current_stream().synchronize
    tsync = torch.cuda.synchronize
    for case in args.cases:
        m, p, n = parse(case)
        print(f"== {case} float32\n{plan(m, p, n)}")
        x = cp.asarray(rng.standard_normal((m, p ** n)), dtype=cp.float32)
        fs = [cp.asarray(rng.standard_normal((p, p)), dtype=cp.float32) for _ in range(n)]
        xt = torch.as_tensor(cp.asnumpy(x), device="cuda")
        ft = [torch.as_tensor(cp.asnumpy(f), device="cuda") for f in fs]
        arrays = [xt] + ft
        kronlinalg.kron_matmul(x, fs)
        kronlinalg.kron_matmul(xt, ft)
        print(" CuPy")
        show({"kron_matmul auto": lambda: kronlinalg.kron_matmul(x, fs),
              "kron_matmul sliced": lambda: kronlinalg.kron_matmul(x, fs, algorithm="sliced"),
              "keys of the arrays (Python loop)": lambda: [
                  (type(a), a.shape, a.strides, a.dtype, a.data.device_id) for a in [x] + fs],
              "cupy.empty(result)": lambda: cp.empty(x.shape, dtype="float32"),
              "x + 0 (one CuPy kernel)": lambda: x + 0}, csync)
        print(" torch")
        t0 = xt
        tmpl = xt.new_empty(()).expand(xt.shape)  # what replays allocate from
        show({"kron_matmul auto": lambda: kronlinalg.kron_matmul(xt, ft),
              "kron_matmul sliced": lambda: kronlinalg.kron_matmul(xt, ft, algorithm="sliced"),
              "keys of the arrays (Python loop)": lambda: [
                  (type(a), a.shape, a.stride(), a.dtype, a.get_device(), a.requires_grad)
                  for a in arrays],
              "one array: .shape": lambda: t0.shape,
              "one array: .stride()": lambda: t0.stride(),
              "one array: .get_device()": lambda: t0.get_device(),
              "one array: .requires_grad": lambda: t0.requires_grad,
              "one array: .dtype": lambda: t0.dtype,
              "one array: .data_ptr()": lambda: t0.data_ptr(),
              "one array: .is_contiguous()": lambda: t0.is_contiguous(),
              "torch.empty_like(xt)": lambda: torch.empty_like(xt),
              "torch.empty_like(stride-0 template)": lambda: torch.empty_like(tmpl),
              "torch._C._cuda_getDevice()": torch._C._cuda_getDevice,
              "torch._C._cuda_getCurrentRawStream(0)": lambda: torch._C._cuda_getCurrentRawStream(0),
              "xt + 0 (one torch kernel)": lambda: xt + 0}, tsync)
        # (last: the profiler leaves hooks that slow every later call)
        print("  kernels per torch call:", kernels_per_call(torch, lambda: kronlinalg.kron_matmul(xt, ft)))
        if args.cprofile:
            profile(lambda: kronlinalg.kron_matmul(xt, ft), tsync, f"{case} torch")
    if args.structured:
        structured_parts(cp, torch, kronlinalg, rng, csync, tsync, args.cprofile)


def structured_parts(cp, torch, kronlinalg, rng, csync, tsync, cprofile):
    """structured_matmul's repeated tiny call (host_time.py's case) against its parts."""
    from kronlinalg.common.signatures import arrays_signature
    from kronlinalg.structured import KSChain, KSFactor

    chain = KSChain.random([(2, 16, 16, 4)], rng=1, dtype="float32")
    values = np.asarray(chain[0].values)
    x = rng.standard_normal((64, 128)).astype("float32")
    cchain = KSChain([KSFactor(chain[0].pattern, cp.asarray(values))])
    tchain = KSChain([KSFactor(chain[0].pattern, torch.as_tensor(values, device="cuda"))])
    xc, xt = cp.asarray(x), torch.as_tensor(x, device="cuda")
    print("== structured_matmul 64x(2,16,16,4) float32")
    for lib, xx, ch, sync in (("CuPy", xc, cchain, csync), ("torch", xt, tchain, tsync)):
        kronlinalg.structured_matmul(xx, ch)
        out = kronlinalg.structured_matmul(xx, ch)
        arrays = [xx, ch[0].values]
        print(f" {lib}: result {tuple(out.shape)} {out.dtype}")
        rows = {"structured_matmul auto": lambda: kronlinalg.structured_matmul(xx, ch),
                "structured_matmul kernel": lambda: kronlinalg.structured_matmul(
                    xx, ch, algorithm="kernel"),
                "arrays_signature([x, values])": lambda: arrays_signature(arrays, False),
                "chain.factors, f.values, f.pattern": lambda: [
                    (f.values, f.pattern) for f in ch.factors]}
        if lib == "torch":
            real = torch.empty_like(out)
            tmpl = out.new_empty(()).expand(out.shape)
            rows.update({"torch.empty_like(real result-sized)": lambda: torch.empty_like(real),
                         "torch.empty_like(stride-0 template)": lambda: torch.empty_like(tmpl),
                         "xt + 0 (one torch kernel)": lambda: xt + 0})
        else:
            rows.update({"cupy.ndarray(result shape)": lambda: cp.ndarray(out.shape, "float32"),
                         "xc + 0 (one CuPy kernel)": lambda: xc + 0})
        show(rows, sync)
    print("  kernels per torch call:", kernels_per_call(
        torch, lambda: kronlinalg.structured_matmul(xt, tchain)))
    if cprofile:
        profile(lambda: kronlinalg.structured_matmul(xt, tchain), tsync, "structured torch")


if __name__ == "__main__":
    main()
