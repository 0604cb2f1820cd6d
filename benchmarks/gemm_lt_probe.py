"""How much a per-shape choice among cuBLASLt's GEMM algorithms gains over cuBLAS's default.

For each a = d = 1 Kronecker-sparse pattern of the structured benchmark (one dense GEMM,
batch 25088), times CuPy's ``x @ w.T`` (the dense baseline) and every algorithm
cuBLASLt's heuristic offers for the same product, in both layouts, and prints the best.
Device time: loops of calls between two CUDA events, queued behind a spinning kernel. GPU only.
"""

from __future__ import annotations

import argparse
import ctypes
import json

import numpy as np


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t),
                ("state", ctypes.c_int), ("waves", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


def _lt():
    lib = ctypes.CDLL("libcublasLt.so.13")
    vp, pvp, i32, u64, sz = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                             ctypes.c_uint64, ctypes.c_size_t)
    signatures = {
        "cublasLtCreate": [pvp],
        "cublasLtMatmulDescCreate": [pvp, i32, i32],
        "cublasLtMatmulDescSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatrixLayoutCreate": [pvp, i32, u64, u64, ctypes.c_int64],
        "cublasLtMatmulPreferenceCreate": [pvp],
        "cublasLtMatmulPreferenceSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, i32,
                                           ctypes.POINTER(_Heuristic), ctypes.POINTER(i32)],
        "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, sz, vp],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_int, argtypes
    return lib


def _ptr(a):
    return a.data_ptr() if hasattr(a, "data_ptr") else a.data.ptr


def _check(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: cuBLASLt status {status}")


def main():
    import cupy as cp

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", type=int, default=25088)
    ap.add_argument("--loops", type=int, default=20)
    args = ap.parse_args()
    lib = _lt()
    vp = ctypes.c_void_p
    handle = vp()
    _check(lib.cublasLtCreate(ctypes.byref(handle)), "create")
    ws_bytes = 32 << 20
    workspace = cp.empty(ws_bytes, dtype=cp.uint8)
    stream = cp.cuda.get_current_stream().ptr
    alpha = np.ones(1, np.float32)
    beta = np.zeros(1, np.float32)

    def layout(dt, rows, cols, ld):
        h = vp()
        _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(h), dt, rows, cols, ld), "layout")
        return h

    spin = cp.RawKernel(r"""
    extern "C" __global__ void spin(long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) {}
    }""", "spin")

    def timed(fn, loops):
        """Device time per call: a spinning kernel ahead of the start event keeps the GPU
        busy while the host enqueues the loop, so host time per call is hidden."""
        fn()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(5):
            spin((1,), (1,), (np.int64(3_000_000 + 80_000 * loops),))
            start.record()
            for _ in range(loops):
                fn()
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / loops)
        return float(np.median(times))

    sizes = [(48, 48), (48, 192), (64, 256), (96, 96), (128, 128), (128, 512), (256, 1024),
             (384, 96), (384, 384), (512, 512), (768, 768)]
    rows = []
    for dtype, code in (("float16", 2), ("bfloat16", 14)):
        for b, c in sizes:
            for lay in ("batch_first", "batch_last"):
                n = args.batch
                if dtype == "float16":
                    x = cp.random.standard_normal((n, c) if lay == "batch_first" else (c, n)).astype(cp.float16)
                    w = cp.random.standard_normal((b, c)).astype(cp.float16)
                    base = (lambda x=x, w=w: x @ w.T) if lay == "batch_first" else (lambda x=x, w=w: w @ x)
                    y = cp.empty((n, b) if lay == "batch_first" else (b, n), cp.float16)
                else:  # torch holds bfloat16 (CuPy has no such dtype); both on the null stream
                    import torch
                    shape = (n, c) if lay == "batch_first" else (c, n)
                    x = torch.randn(shape, device="cuda").bfloat16()
                    w = torch.randn((b, c), device="cuda").bfloat16()
                    y = torch.empty((n, b) if lay == "batch_first" else (b, n), device="cuda",
                                    dtype=torch.bfloat16)
                    base = (lambda x=x, w=w: x @ w.T) if lay == "batch_first" else (lambda x=x, w=w: w @ x)
                desc = vp()
                _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), 68, 0), "desc")
                if lay == "batch_first":  # Y^T (b x n) = W^T-op (b x c) . X^T (c x n), col-major
                    ta, tb = 1, 0
                    m_, n_, k_ = b, n, c
                    a_l, b_l, c_l = layout(code, c, b, c), layout(code, c, n, c), layout(code, b, n, b)
                    pa, pb = _ptr(w), _ptr(x)
                else:  # Y^T (n x b) = X^T (n x c) . K^T (c x b), col-major
                    ta, tb = 0, 0
                    m_, n_, k_ = n, b, c
                    a_l, b_l, c_l = layout(code, n, c, n), layout(code, c, b, c), layout(code, n, b, n)
                    pa, pb = _ptr(x), _ptr(w)
                for attr, val in ((3, ta), (4, tb)):
                    v = ctypes.c_int32(val)
                    _check(lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(v), 4), "attr")
                pref = vp()
                _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "pref")
                wsz = ctypes.c_uint64(ws_bytes)
                _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, 1, ctypes.byref(wsz), 8), "pref attr")
                results = (_Heuristic * 32)()
                count = ctypes.c_int(0)
                _check(lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, a_l, b_l, c_l, c_l, pref, 32,
                                                          results, ctypes.byref(count)), "heuristic")

                def run(i, desc=desc, a_l=a_l, b_l=b_l, c_l=c_l, pa=pa, pb=pb, y=y):
                    r = results[i]
                    return lib.cublasLtMatmul(handle, desc, alpha.ctypes.data, pa, a_l, vp(pb), b_l,
                                              beta.ctypes.data, _ptr(y), c_l, _ptr(y), c_l,
                                              ctypes.addressof(r.algo), workspace.data.ptr,
                                              r.workspace, stream)

                lt = []
                for i in range(count.value):
                    if results[i].state != 0 or run(i) != 0:
                        continue
                    lt.append((timed(lambda i=i: run(i), args.loops), i, results[i].workspace))
                base_ms = timed(base, args.loops) if base is not None else None
                best = min(lt) if lt else (None, None, None)
                err = None
                if lt:  # the best algorithm's result against the baseline's
                    run(best[1])
                    ref = base()
                    diff = (y.float() - ref.float()).abs().max().item() if dtype == "bfloat16" else \
                        float(cp.abs(y.astype(cp.float32) - ref.astype(cp.float32)).max())
                    scale = ref.float().abs().max().item() if dtype == "bfloat16" else \
                        float(cp.abs(ref.astype(cp.float32)).max())
                    err = diff / scale
                row = dict(dtype=dtype, layout=lay, b=b, c=c, cupy_ms=base_ms,
                           lt_first_ms=lt[0][0] if lt else None, lt_best_ms=best[0],
                           lt_best_index=best[1], n_algos=len(lt), rel_err=err,
                           floor_ms=2 * n * (b + c) / 2.96e9)
                rows.append(row)
                print(f"{dtype:9s} {lay:11s} b={b:4d} c={c:4d} cupy={base_ms or 0:.4f} "
                      f"lt0={row['lt_first_ms'] or 0:.4f} best={best[0] or 0:.4f} (#{best[1]}, "
                      f"{len(lt)} algos) err={err or 0:.1e} floor={row['floor_ms']:.4f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
