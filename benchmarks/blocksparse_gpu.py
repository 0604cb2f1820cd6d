"""spmm / spgemm on one GPU against the issue's baselines, in one run.

    python benchmarks/blocksparse_gpu.py --out blocksparse.json [--budget 150]

CUDA events on warm inputs: the median over 5 batches of 10 back-to-back calls (calls over
20 ms: 3 single calls); "call" columns time one call from an idle GPU (host work included).
Random 16 x 16 block patterns (torch CUDA tensors).  Sections, each skipped once the budget is
spent (the JSON is written after every one):

1. SpMM, N = 16384, RHS 64 / 256, density 0.05 / 0.1 / 0.25, FP16 / FP32 (3xTF32 and IEEE) /
   FP64: ours on a row-order matrix (the default 1D kernel, and the warp kernel), on a
   Morton-order one (the same 1D kernel through the row permutation), the 2D kernel, dense
   torch.mm (cuBLAS), torch BSR (to_sparse_bsr((16, 16)) @ dense), cuSPARSE CSR through cupyx
   (FP32/FP64); what "auto" picks; the error against dense.
2. N = 4096: "auto" against dense at densities 0.05 .. 0.5.
3. SpGEMM, N = 16384, density 0.005 / 0.02: ours (symbolic timed apart), cupyx CSR A @ A (its
   nnz and values checked), dense A @ A, auto; FP32, FP16 and FP64; N = 4096 at 0.5 (FP32).
4. Batched small block-sparse (spmm_batched; FP16, batch 10^4, orders 64 / 128 / 256, 50 %,
   one shared pattern) against torch.bmm; RHS = order and narrow.
``--sections`` runs a subset (each its share of ``--budget``).
Prints markdown tables; the JSON holds every number.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

import kronlinalg
from kronlinalg import BatchedBlockSparseMatrix, BlockSparseMatrix, spgemm, spmm, spmm_batched
from kronlinalg.blocksparse import bs_cuda, float32_precision, symbolic
from kronlinalg.blocksparse_batched import bs_cuda as batched_cuda

try:
    import cupy as cp
    import cupyx.scipy.sparse as cpsp
except ImportError:  # pragma: no cover
    cp = None

START = time.time()
DT = {"fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}


def cuda_time(fn, reps=10, warm=2, batches=5):
    """ms per call, warm: the median over `batches` of `reps` back-to-back calls between two
    CUDA events (the host's per-call work overlaps the GPU's, as in a loop of calls); calls
    over 20 ms are timed one at a time, 3 times."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    if call_time(fn, 1) > 20:
        reps, batches = 1, 3
    times = []
    for _ in range(batches):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / reps)
    return float(np.median(times))


def call_time(fn, reps=5):
    """ms of one call from an idle GPU (the host's per-call work included), median of reps."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return float(np.median(times))


def with_kernel(variant, fn):
    """fn() with the b = 16 SpMM kernel `variant` (0 panel, 1 warp per row, 2 panel, 128-column
    half tiles)."""
    prev = bs_cuda.spmm_variant(variant)
    try:
        return fn()
    finally:
        bs_cuda.spmm_variant(prev)


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


def spmm_section(res, budget, dtypes=("fp16", "fp32", "fp64")):
    rows = []
    for dname in dtypes:
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
                ours = lambda: spmm(A, X, algorithm="blocksparse")  # noqa: E731
                row["ours_ms"] = cuda_time(ours)
                row["ours_call_ms"] = call_time(ours)
                row["ours_warp_ms"] = with_kernel(1, lambda: cuda_time(ours))
                row["ours_morton_ms"] = cuda_time(lambda: spmm(Am, X, algorithm="blocksparse"))
                row["ours_2d_ms"] = cuda_time(lambda: spmm(Am, X, algorithm="morton"))
                row["x_2d_over_1d"] = row["ours_morton_ms"] / row["ours_2d_ms"]
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
                row["err_warp"] = with_kernel(1, lambda: rel(ours(), ref))
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
                   "auto": kronlinalg.plan("spmm", (4096, 4096), (4096, 256),
                                           dtype=str(dt).split(".")[-1], device=X, block=16,
                                           nnzb=A.nnz_blocks, skew=1.0, lib="torch", beta=0,
                                           order="row", tile=0)[0].name,
                   "auto_call_ms": call_time(lambda: spmm(A, X)),
                   "dense_call_ms": call_time(lambda: dense @ X),
                   "auto_ms": cuda_time(lambda: spmm(A, X)),
                   "ours_ms": cuda_time(lambda: spmm(A, X, algorithm="blocksparse")),
                   "dense_ms": cuda_time(lambda: dense @ X)}
            row["auto_over_dense"] = row["auto_ms"] / row["dense_ms"]
            row["auto_call_over_dense"] = row["auto_call_ms"] / row["dense_call_ms"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def cupyx_csr(dense):
    tc = dense.to_sparse_csr()
    return cpsp.csr_matrix((cp.asarray(tc.values()), cp.asarray(tc.col_indices().to(torch.int32)),
                            cp.asarray(tc.crow_indices().to(torch.int32))),
                           shape=tuple(dense.shape))


def spgemm_section(budget, only_dense_output=False):
    """N = 16384 at block densities 0.005 / 0.02 (FP32, FP16, FP64), and N = 4096 at 0.5 (the
    output dense: auto should take dense; cupyx returned an empty matrix there once)."""
    rows = []
    for N, dname, density in ((16384, "fp32", 0.005), (16384, "fp32", 0.02),
                              (4096, "fp32", 0.5), (16384, "fp16", 0.005),
                              (16384, "fp16", 0.02), (16384, "fp64", 0.005),
                              (16384, "fp64", 0.02)):
        if only_dense_output and density != 0.5:
            continue
        if time.time() - START > budget:
            return rows
        dt = DT[dname]
        A = random_bsm(N, density, dt, seed=11)
        R = N // 16
        row = {"N": N, "density": density, "dtype": dname, "nnzb": A.nnz_blocks}
        C = spgemm(A, A, algorithm="blocksparse")
        row["out_nnzb"] = C.nnz_blocks
        row["out_density"] = C.nnz_blocks / (R * R)
        row["ours_ms"] = cuda_time(lambda: spgemm(A, A, algorithm="blocksparse"), reps=5)
        row["symbolic_ms"] = cuda_time(lambda: symbolic(A, A), reps=5)
        row["symbolic_share"] = row["symbolic_ms"] / row["ours_ms"]
        dense = A.to_dense()
        ref = dense.double() @ dense.double() if dname != "fp16" else None
        if ref is not None:
            row["err_ours"] = rel(C.to_dense(), ref)
        row["dense_ms"] = cuda_time(lambda: dense @ dense, reps=3)
        row["auto"] = kronlinalg.plan("spgemm", (N, N), (N, N),
                                      dtype=str(dt).split(".")[-1], device=dense, block=16,
                                      nnz_a=A.nnz_blocks, nnz_b=A.nnz_blocks,
                                      lib="torch")[0].name
        row["auto_ms"] = cuda_time(lambda: spgemm(A, A), reps=3)
        row["dense_alg_ms"] = cuda_time(lambda: spgemm(A, A, algorithm="dense"), reps=3)
        row["auto_over_best"] = row["auto_ms"] / min(row["ours_ms"], row["dense_ms"])
        row["auto_over_dense"] = row["auto_ms"] / row["dense_ms"]
        product = dense @ dense
        row["blockify_ms"] = cuda_time(lambda: BlockSparseMatrix.from_dense(product), reps=3)
        # its parts: the copy into block order, the per-block nonzero scan (no host sync)
        blocks = product.view(R, 16, R, 16).permute(0, 2, 1, 3).contiguous()
        row["blockify_copy_ms"] = cuda_time(
            lambda: product.view(R, 16, R, 16).permute(0, 2, 1, 3).contiguous(), reps=3)
        row["blockify_scan_ms"] = cuda_time(lambda: torch.any(blocks.view(R * R, 256), dim=1),
                                            reps=3)
        del blocks
        del product
        if cp is not None and dname == "fp32":
            csr = cupyx_csr(dense)
            out = csr @ csr
            row["cusparse_out_nnz"] = int(out.nnz)
            if ref is not None:
                got = torch.as_tensor(out.toarray(), device="cuda")
                row["err_cusparse"] = rel(got, ref)
                del got
            row["cusparse_csr_spgemm_ms"] = cuda_time(lambda: csr @ csr, reps=1, batches=3)
            row["x_cusparse"] = row["cusparse_csr_spgemm_ms"] / row["ours_ms"]
            del csr, out
        del dense, C, ref
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def batched_section(budget):
    """Batched small block-sparse products over one shared pattern (spmm_batched), batch 10^4,
    50 % block density, FP16 (one BF16 row): the batched kernel against torch.bmm of the dense
    stacks of the same order (X (batch, order, n) alike), at n = order (the issue's case) and
    narrow right-hand sides; order 64 also through the block-diagonal BlockSparseMatrix and
    spmm (the route before the batched kernel).  "bytes" are what each must move at least;
    their ratio bounds ours / bmm for two kernels at the same bandwidth."""
    rows = []
    batch, b = 10_000, 16
    for order, n, dname in ((64, 64, "fp16"), (128, 128, "fp16"), (256, 256, "fp16"),
                            (64, 16, "fp16"), (128, 32, "fp16"), (256, 32, "fp16"),
                            (128, 128, "bf16")):
        if time.time() - START > budget:
            return rows
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dname]
        q = order // b
        g = torch.Generator(device="cuda").manual_seed(order + n)
        mask = torch.rand((q, q), device="cuda", generator=g) < 0.5
        ri, ci = torch.nonzero(mask, as_tuple=True)
        nnzb = ri.numel()
        val = torch.randn((batch, nnzb, b, b), device="cuda", generator=g).to(dt)
        rp = torch.zeros(q + 1, dtype=torch.int64, device="cuda")
        rp[1:] = torch.cumsum(torch.bincount(ri, minlength=q), 0)
        A = BatchedBlockSparseMatrix(val, rp, ci.to(torch.int64), shape=(order, order))
        dense = A.to_dense().contiguous()
        X = torch.randn((batch, order, n), device="cuda", generator=g).to(dt)
        row = {"batch": batch, "order": order, "rhs": n, "dtype": dname, "nnzb": nnzb,
               "density": nnzb / (q * q)}
        ours = lambda: spmm_batched(A, X, algorithm="blocksparse")  # noqa: E731
        row["ours_ms"] = cuda_time(ours)
        row["ours_call_ms"] = call_time(ours)
        prev = batched_cuda.batched_pipeline(1)  # the first version: 2 stages, 256 threads
        try:
            row["ours_first_ms"] = cuda_time(ours)
        finally:
            batched_cuda.batched_pipeline(prev)
        if n > 32:  # a narrower RHS tile: smaller stages, A re-read more often
            prev = batched_cuda.batched_tile_cap(32)
            try:
                row["ours_nt32_ms"] = cuda_time(ours)
            finally:
                batched_cuda.batched_tile_cap(prev)
        row["bmm_ms"] = cuda_time(lambda: torch.bmm(dense, X))
        row["ratio"] = row["ours_ms"] / row["bmm_ms"]
        row["auto"] = kronlinalg.plan("spmm_batched", (batch, order, order), (batch, order, n),
                                      dtype=str(dt).split(".")[-1], device=X, block=16,
                                      nnzb=nnzb, lib="torch")[0].name
        row["auto_ms"] = cuda_time(lambda: spmm_batched(A, X))
        ours_bytes = batch * (nnzb * b * b + 2 * order * n) * 2
        bmm_bytes = batch * (order * order + 2 * order * n) * 2
        row["ours_tbs"] = ours_bytes / row["ours_ms"] / 1e9
        row["bmm_tbs"] = bmm_bytes / row["bmm_ms"] / 1e9
        row["bytes_ratio"] = ours_bytes / bmm_bytes
        ref = torch.bmm(dense.float(), X.float())
        row["err_ours"] = rel(ours(), ref)
        row["err_bmm"] = rel(torch.bmm(dense, X), ref)
        if order == 64 and n == 64 and dname == "fp16":  # the block-diagonal route
            bi = torch.arange(batch, device="cuda").repeat_interleave(nnzb)
            brow, bcol = bi * q + ri.repeat(batch), bi * q + ci.repeat(batch)
            drp = torch.zeros(batch * q + 1, dtype=torch.int64, device="cuda")
            drp[1:] = torch.cumsum(torch.bincount(brow, minlength=batch * q), 0)
            D = BlockSparseMatrix(val.reshape(-1, b, b), drp, bcol, shape=(batch * order,) * 2)
            X2 = X.reshape(batch * order, n)
            row["blockdiag_ms"] = cuda_time(lambda: spmm(D, X2, algorithm="blocksparse"))
            row["err_blockdiag"] = rel(spmm(D, X2, algorithm="blocksparse").reshape(ref.shape),
                                       ref)
            del D, X2
        del A, X, dense, ref, val
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
    p.add_argument("--sections", default="spmm,auto,spgemm,batched",
                   help="comma-separated subset of spmm,auto,spgemm,batched")
    p.add_argument("--spmm-dtypes", default="fp16,fp32,fp64")
    p.add_argument("--spgemm-dense-only", action="store_true",
                   help="only the SpGEMM whose output is dense (N = 4096, 50 %%)")
    args = p.parse_args()
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
           "command": "python benchmarks/blocksparse_gpu.py"}
    save = lambda: json.dump(res, open(args.out, "w"), indent=1)  # noqa: E731
    chosen = args.sections.split(",")
    weights = {"spmm": 5, "auto": 1, "spgemm": 2, "batched": 2}
    total = sum(weights[c] for c in chosen)
    done, deadline = 0, {}
    for name in ("spmm", "auto", "spgemm", "batched"):  # each section's share of the budget
        if name in chosen:
            done += weights[name]
            deadline[name] = args.budget * done / total
    runs = {"spmm": lambda: spmm_section(res, deadline["spmm"],
                                         tuple(args.spmm_dtypes.split(","))),
            "auto_4096": lambda: auto_section(deadline["auto"]),
            "spgemm": lambda: spgemm_section(deadline["spgemm"], args.spgemm_dense_only),
            "batched": lambda: batched_section(deadline["batched"])}
    for key, run in runs.items():
        res[key] = run() if key.split("_")[0] in chosen else []
        save()
    print(f"\n{res['device']}, {res['date']}; ms, median of >= 10 (CUDA events)\n")
    print(table(res["spmm"], ["dtype", "density", "rhs", "ours_ms", "ours_call_ms",
                              "ours_warp_ms", "ours_morton_ms", "ours_2d_ms",
                              "ours_ieee_ms", "dense_ms", "torch_bsr_ms", "cusparse_csr_ms",
                              "x_torch_bsr", "x_dense", "x_cusparse", "x_2d_over_1d", "auto",
                              "auto_morton", "err_ours", "err_2d", "err_warp"]))
    print()
    print(table(res["auto_4096"], ["dtype", "density", "auto", "auto_ms", "ours_ms", "dense_ms",
                                   "auto_over_dense", "auto_call_ms", "dense_call_ms",
                                   "auto_call_over_dense"]))
    print()
    print(table(res["spgemm"], ["N", "dtype", "density", "out_density", "out_nnzb", "ours_ms",
                                "symbolic_ms", "symbolic_share", "cusparse_csr_spgemm_ms",
                                "cusparse_out_nnz", "x_cusparse", "dense_ms", "dense_alg_ms",
                                "auto", "auto_ms", "auto_over_best", "auto_over_dense",
                                "blockify_ms", "blockify_copy_ms", "blockify_scan_ms",
                                "err_ours", "err_cusparse"]))
    print()
    print(table(res["batched"], ["order", "rhs", "dtype", "nnzb", "ours_ms", "ours_call_ms",
                                 "ours_first_ms", "ours_nt32_ms", "bmm_ms", "ratio", "bytes_ratio", "ours_tbs", "bmm_tbs",
                                 "auto", "auto_ms", "blockdiag_ms", "err_ours", "err_bmm"]))


if __name__ == "__main__":
    main()
