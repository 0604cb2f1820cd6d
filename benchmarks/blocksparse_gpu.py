"""spmm / spgemm on one GPU against the issue's baselines, in one run.

    python benchmarks/blocksparse_gpu.py --out blocksparse.json [--budget 150]

CUDA events on warm inputs, median of >= 10 runs (5 for calls over 20 ms).  Random 16 x 16
block patterns (torch CUDA tensors).  Sections, each skipped once the budget is spent (the JSON
is written after every one):

1. SpMM, N = 16384, RHS 64 / 256, density 0.05 / 0.1 / 0.25, FP16 / FP32 (3xTF32 and IEEE) /
   FP64: ours on a row-order matrix and on a Morton-order one (the same 1D kernel through the
   row permutation), dense torch.mm (cuBLAS), torch BSR (to_sparse_bsr((16, 16)) @ dense),
   cuSPARSE CSR through cupyx (FP32/FP64); what "auto" picks; the error against dense.
2. N = 4096: "auto" against dense at densities 0.05 .. 0.5.
3. SpGEMM, N = 16384, density 0.005 / 0.02: ours (symbolic timed apart), cupyx CSR A @ A (its
   nnz checked), dense A @ A; FP32, FP16 and FP64.
Prints markdown tables; the JSON holds every number.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

import kronlinalg
from kronlinalg import BlockSparseMatrix, spgemm, spmm
from kronlinalg.blocksparse import float32_precision, symbolic

try:
    import cupy as cp
    import cupyx.scipy.sparse as cpsp
except ImportError:  # pragma: no cover
    cp = None

START = time.time()
DT = {"fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}


def cuda_time(fn, reps=10, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    e1.synchronize()
    if e0.elapsed_time(e1) > 20:
        reps = 5
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return float(np.median(times))


def random_bsm(N, density, dtype, b=16, seed=0, order="row"):
    g = torch.Generator(device="cuda").manual_seed(seed)
    R = N // b
    mask = torch.rand((R, R), device="cuda", generator=g) < density
    rows, cols = torch.nonzero(mask, as_tuple=True)
    nnzb = rows.numel()
    val = torch.randn((nnzb, b, b), device="cuda", generator=g).to(dtype)
    rp = torch.zeros(R + 1, dtype=torch.int64, device="cuda")
    rp[1:] = torch.cumsum(torch.bincount(rows, minlength=R), 0)
    A = BlockSparseMatrix(val, rp, cols.to(torch.int64), shape=(N, N))
    return A if order == "row" else A.with_order(order)


def rel(a, b):
    a, b = a.double(), b.double()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def spmm_section(res, budget):
    rows = []
    for dname in ("fp16", "fp32", "fp64"):
        for density in (0.05, 0.1, 0.25):
            if time.time() - START > budget:
                return rows
            dt = DT[dname]
            A = random_bsm(16384, density, dt, seed=int(density * 1000))
            Am = A.with_order("morton")
            dense = A.to_dense()
            bsr = dense.to_sparse_bsr((16, 16))
            csr = None
            if cp is not None and dname != "fp16":
                tc = dense.to_sparse_csr()
                csr = cpsp.csr_matrix((cp.asarray(tc.values()),
                                       cp.asarray(tc.col_indices().to(torch.int32)),
                                       cp.asarray(tc.crow_indices().to(torch.int32))),
                                      shape=tuple(dense.shape))
                del tc
            for n in (64, 256):
                X = torch.randn((16384, n), device="cuda").to(dt)
                row = {"N": 16384, "density": density, "dtype": dname, "rhs": n,
                       "nnzb": A.nnz_blocks}
                row["ours_ms"] = cuda_time(lambda: spmm(A, X, algorithm="blocksparse"))
                row["ours_morton_ms"] = cuda_time(lambda: spmm(Am, X, algorithm="blocksparse"))
                row["ours_2d_ms"] = cuda_time(lambda: spmm(Am, X, algorithm="morton"))
                if dname == "fp32":
                    prev = float32_precision("ieee")
                    row["ours_ieee_ms"] = cuda_time(lambda: spmm(A, X, algorithm="blocksparse"))
                    float32_precision(prev)
                row["dense_ms"] = cuda_time(lambda: dense @ X)
                row["torch_bsr_ms"] = cuda_time(lambda: bsr @ X)
                if csr is not None:
                    Xc = cp.asarray(X)
                    row["cusparse_csr_ms"] = cuda_time(lambda: csr @ Xc)
                row["auto"] = kronlinalg.plan(
                    "spmm", (16384, 16384), (16384, n), dtype=str(dt).split(".")[-1],
                    device=X, block=16, nnzb=A.nnz_blocks, skew=1.0, lib="torch", beta=0,
                    order="row", tile=0)[0].name
                ref = dense.double() @ X.double()
                row["err_ours"] = rel(spmm(A, X, algorithm="blocksparse"), ref)
                row["err_morton"] = rel(spmm(Am, X, algorithm="blocksparse"), ref)
                row["err_2d"] = rel(spmm(Am, X, algorithm="morton"), ref)
                row["auto_morton"] = kronlinalg.plan(
                    "spmm", (16384, 16384), (16384, n), dtype=str(dt).split(".")[-1],
                    device=X, block=16, nnzb=A.nnz_blocks, skew=1.0, lib="torch", beta=0,
                    order="morton", tile=4)[0].name
                row["err_dense"] = rel(dense @ X, ref)
                row["x_torch_bsr"] = row["torch_bsr_ms"] / row["ours_ms"]
                row["x_dense"] = row["dense_ms"] / row["ours_ms"]
                if "cusparse_csr_ms" in row:
                    row["x_cusparse"] = row["cusparse_csr_ms"] / row["ours_ms"]
                rows.append(row)
                print(json.dumps(row), flush=True)
            del dense, bsr, csr
            torch.cuda.empty_cache()
    return rows


def auto_section(budget):
    rows = []
    for dname in ("fp16", "fp32", "fp64"):
        for density in (0.05, 0.1, 0.25, 0.5):
            if time.time() - START > budget:
                return rows
            dt = DT[dname]
            A = random_bsm(4096, density, dt, seed=7)
            dense = A.to_dense()
            X = torch.randn((4096, 256), device="cuda").to(dt)
            spmm(A, X)  # the first auto call may densify (kept on A)
            row = {"N": 4096, "density": density, "dtype": dname, "rhs": 256,
                   "auto_ms": cuda_time(lambda: spmm(A, X)),
                   "ours_ms": cuda_time(lambda: spmm(A, X, algorithm="blocksparse")),
                   "dense_ms": cuda_time(lambda: dense @ X)}
            row["auto_over_dense"] = row["auto_ms"] / row["dense_ms"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def spgemm_section(budget):
    rows = []
    for dname, density in (("fp32", 0.005), ("fp32", 0.02), ("fp16", 0.005), ("fp16", 0.02),
                           ("fp64", 0.005), ("fp64", 0.02)):
        if time.time() - START > budget:
            return rows
        dt = DT[dname]
        A = random_bsm(16384, density, dt, seed=11)
        row = {"N": 16384, "density": density, "dtype": dname, "nnzb": A.nnz_blocks}
        C = spgemm(A, A, algorithm="blocksparse")
        row["out_nnzb"] = C.nnz_blocks
        row["out_density"] = C.nnz_blocks / (1024 * 1024)
        row["ours_ms"] = cuda_time(lambda: spgemm(A, A, algorithm="blocksparse"), reps=10)
        row["symbolic_ms"] = cuda_time(lambda: symbolic(A, A), reps=10)
        row["symbolic_share"] = row["symbolic_ms"] / row["ours_ms"]
        dense = A.to_dense()
        ref = dense.double() @ dense.double() if dname != "fp16" else None
        if ref is not None:
            row["err_ours"] = rel(C.to_dense(), ref)
            del ref
        row["dense_ms"] = cuda_time(lambda: dense @ dense, reps=5)
        if cp is not None and dname == "fp32":
            tc = dense.to_sparse_csr()
            csr = cpsp.csr_matrix((cp.asarray(tc.values()),
                                   cp.asarray(tc.col_indices().to(torch.int32)),
                                   cp.asarray(tc.crow_indices().to(torch.int32))),
                                  shape=tuple(dense.shape))
            out = csr @ csr
            row["cusparse_out_nnz"] = int(out.nnz)
            row["cusparse_csr_spgemm_ms"] = cuda_time(lambda: csr @ csr, reps=5)
            row["x_cusparse"] = row["cusparse_csr_spgemm_ms"] / row["ours_ms"]
            del tc, csr, out
        row["auto"] = kronlinalg.plan("spgemm", (16384, 16384), (16384, 16384),
                                      dtype=str(dt).split(".")[-1], device=dense, block=16,
                                      nnz_a=A.nnz_blocks, nnz_b=A.nnz_blocks,
                                      lib="torch")[0].name
        del dense, C
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def table(rows, cols):
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)
    body = []
    for r in rows:
        body.append("| " + " | ".join(
            (f"{r[c]:.3g}" if isinstance(r.get(c), float) else str(r.get(c, "—"))) for c in cols)
            + " |")
    return "\n".join([head] + body)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="blocksparse.json")
    p.add_argument("--budget", type=float, default=150.0)
    args = p.parse_args()
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
           "command": "python benchmarks/blocksparse_gpu.py"}
    save = lambda: json.dump(res, open(args.out, "w"), indent=1)  # noqa: E731
    res["spmm"] = spmm_section(res, args.budget * 0.6)
    save()
    res["auto_4096"] = auto_section(args.budget * 0.7)
    save()
    res["spgemm"] = spgemm_section(args.budget)
    save()
    print(f"\n{res['device']}, {res['date']}; ms, median of >= 10 (CUDA events)\n")
    print(table(res["spmm"], ["dtype", "density", "rhs", "ours_ms", "ours_2d_ms",
                              "ours_morton_ms", "ours_ieee_ms", "dense_ms", "torch_bsr_ms",
                              "cusparse_csr_ms",
                              "x_torch_bsr", "x_dense", "x_cusparse", "auto", "auto_morton",
                              "err_ours", "err_2d"]))
    print()
    print(table(res["auto_4096"], ["dtype", "density", "auto_ms", "ours_ms", "dense_ms",
                                   "auto_over_dense"]))
    print()
    print(table(res["spgemm"], ["dtype", "density", "out_density", "ours_ms", "symbolic_ms",
                                "symbolic_share", "cusparse_csr_spgemm_ms", "cusparse_out_nnz",
                                "x_cusparse", "dense_ms", "auto", "err_ours"]))


if __name__ == "__main__":
    main()
