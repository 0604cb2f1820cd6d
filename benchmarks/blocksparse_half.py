"""Half-precision block-sparse SpMM and the batched kernel: variants side by side, with the
bytes and the roof they run against (issue 34's FP16 rows).

    python benchmarks/blocksparse_half.py --out half.json [--sections spmm,probe,batched]
    python benchmarks/blocksparse_half.py --ncu      # one panel launch per variant, for ncu
    (--quick: six panel variants, not all)

1. spmm, N = 16384, FP16 (one BF16 row), RHS 256 and 64, densities 0.05 / 0.1 / 0.25: the
   panel kernel under each option set of ``bs_cuda.spmm_panel_opts`` (C staged through shared
   memory for 16-byte stores, A read L2 evict-first, 4 / 8 / 12 stages, the persistent form),
   the 128-column tile,
   dense torch.mm (cuBLAS); whether every variant gives the bits of the first; the bytes each
   moves from L2 into shared memory (a B block row per stored block, the block, C) and the rate.
2. A probe of that roof: CTAs of 128 threads copy random 8 KB panels of an 8 MB (L2-resident)
   array into shared memory with cp.async, S stages deep, k CTAs an SM, and do nothing else.
3. spmm_batched (FP16, batch 10^4, 50 % block density): C staged or stored from fragments,
   torch.bmm; the bytes floor at the HBM3 peak (3.35 TB/s) and at bmm's measured rate.
ms = CUDA events around 10 back-to-back calls, median of 7 batches, the lower of two rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from blocksparse_gpu import cuda_time as bench_cuda_time, random_bsm, rel
from blocksparse_morton import kernel_1d
from kronlinalg import BatchedBlockSparseMatrix, spmm, spmm_batched
from kronlinalg.blocksparse import bs_cuda
from kronlinalg.blocksparse_batched import bs_cuda as batched_cuda

HBM_TBS = 3.35  # H100 SXM5 80 GB, the data sheet's peak
QUICK = "--quick" in sys.argv  # fewer panel variants (the ones that matter after run a)

PANEL = {  # name: spmm_panel_opts value (bit 0 C staged, bit 1 A evict-first, bits 4-7 depth)
    "old": 0 | 4 << 4,
    "C": 1 | 4 << 4,
    "evictA": 2 | 4 << 4,
    "C+evictA": 3 | 4 << 4,
    "C d8": 1 | 8 << 4,
    "C+evictA d8": 3 | 8 << 4,
    "C d12": 1 | 12 << 4,
    "C+evictA d12": 3 | 12 << 4,
    "persistent": 8 | 4 << 4,
    "C persistent": 9 | 4 << 4,
    "C+evictA persistent": 11 | 4 << 4,
}


def cuda_time(fn, reps=10, batches=7):
    """blocksparse_gpu's timing (CUDA events around back-to-back calls), 7 batches."""
    return bench_cuda_time(fn, reps=reps, batches=batches)


def with_opts(opts, fn):
    prev = bs_cuda.spmm_panel_opts(opts)
    try:
        return fn()
    finally:
        bs_cuda.spmm_panel_opts(prev)


def spmm_section():
    rows = []
    cases = [("fp16", 0.05, 256), ("fp16", 0.1, 256), ("fp16", 0.25, 256), ("bf16", 0.05, 256),
             ("fp16", 0.05, 64), ("fp16", 0.1, 64)]
    dts = {"fp16": torch.float16, "bf16": torch.bfloat16}
    for dname, density, n in cases:
        dt = dts[dname]
        A = random_bsm(16384, density, dt, seed=int(density * 1000))
        dense = A.to_dense()
        X = torch.randn((16384, n), device="cuda").to(dt)
        row = {"dtype": dname, "density": density, "rhs": n, "nnzb": A.nnz_blocks}
        names = list(PANEL) if n > 128 else ["old", "C+evictA"]
        if QUICK and n > 128:
            names = ["old", "C+evictA", "C+evictA d8", "persistent", "C persistent",
                     "C+evictA persistent"]
        first = with_opts(PANEL["old"], lambda: spmm(A, X, algorithm="blocksparse"))
        row["err_old"] = rel(first, dense.double() @ X.double())
        row["same_bits"] = {}
        for nm in names:
            got = with_opts(PANEL[nm], lambda: spmm(A, X, algorithm="blocksparse"))
            row["same_bits"][nm] = bool(torch.equal(got, first))
        best = {}
        for _ in range(2):  # two rounds, variants interleaved: the lower of the two
            for nm in names:
                t = with_opts(PANEL[nm], lambda: cuda_time(lambda: spmm(A, X,
                                                                        algorithm="blocksparse")))
                best[nm] = min(best.get(nm, 1e9), t)
            t = cuda_time(lambda: dense @ X)
            best["dense"] = min(best.get("dense", 1e9), t)
        if n > 128:
            prev = bs_cuda.spmm_variant(2)  # 128-column tiles, default options
            try:
                best["tile128"] = cuda_time(lambda: spmm(A, X, algorithm="blocksparse"))
            finally:
                bs_cuda.spmm_variant(prev)
        best["default"] = cuda_time(lambda: spmm(A, X, algorithm="blocksparse"))
        # the launch alone with the work list by row and longest first (A.work_items' orders),
        # alternated twice: the lower of each
        out = torch.empty((16384, n), device="cuda", dtype=dt)
        launches = {o: kernel_1d(A, X, out, order=o) for o in ("row", "longest")}
        for _ in range(2):
            for o, run in launches.items():
                best[f"items_{o}"] = min(best.get(f"items_{o}", 1e9), cuda_time(run))
        for o, run in launches.items():
            out.fill_(float("nan"))
            run()
            row["same_bits"][f"items_{o}"] = bool(torch.equal(out, first))
        row["ms"] = best
        nnzb = A.nnz_blocks
        l2_bytes = nnzb * (16 * n * 2 + 512) + 16384 * n * 2  # B rows + blocks + C
        row["l2_mb"] = l2_bytes / 1e6
        row["tbs"] = {k: l2_bytes / v / 1e9 for k, v in best.items() if k != "dense"}
        row["tflops"] = {k: nnzb * 2 * 256 * n / v / 1e9 for k, v in best.items()
                         if k != "dense"}
        row["x_dense"] = {k: best["dense"] / v for k, v in best.items() if k != "dense"}
        rows.append(row)
        print(json.dumps(row), flush=True)
        del A, dense, X, first
        torch.cuda.empty_cache()
    return rows


PROBE_SRC = r"""
template <int S>
__global__ void probe(const uint4 *__restrict__ X, const int *__restrict__ rows, int nsteps,
                      unsigned long long *sink) {
  extern __shared__ uint4 sm[];  // S stages of 8 KB (512 x 16 bytes)
  const int tid = threadIdx.x;
  const int *mine = rows + (long long)blockIdx.x * nsteps;
  auto issue = [&](int slot, int row) {
    const uint4 *src = X + (long long)row * 512;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      unsigned dst = (unsigned)__cvta_generic_to_shared(sm + slot * 512 + q * 128 + tid);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
                   "l"(src + q * 128 + tid) : "memory");
    }
  };
  for (int s = 0; s < S - 1; ++s) {
    if (s < nsteps) issue(s, mine[s]);
    asm volatile("cp.async.commit_group;\n" ::);
  }
  unsigned acc = 0;
  for (int i = 0; i < nsteps; ++i) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2));
    __syncthreads();
    const int nx = i + S - 1;
    if (nx < nsteps) issue(nx % S, mine[nx]);
    asm volatile("cp.async.commit_group;\n" ::);
    acc ^= sm[(i % S) * 512 + tid].x;
  }
  asm volatile("cp.async.wait_all;\n" ::);
  if (acc == 0x12345678u) sink[0] = acc;
}
"""


def probe_section():
    import cupy as cp
    mod = cp.RawModule(code=PROBE_SRC, options=("-std=c++17",),
                       name_expressions=[f"probe<{s}>" for s in (4, 8, 12)])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    X = cp.zeros(8 << 20, dtype=cp.uint8)  # 1024 panels of 8 KB: X of N = 16384, RHS 256
    sink = cp.zeros(1, dtype=cp.uint64)
    out = []
    nsteps = 400
    for S, k in ((4, 4), (4, 6), (8, 3), (12, 2), (12, 1), (4, 1)):
        fn = mod.get_function(f"probe<{S}>")
        smem = S * 8192
        fn.max_dynamic_shared_size_bytes = smem
        grid = sms * k
        rows = cp.random.randint(0, 1024, size=grid * nsteps, dtype=cp.int32)
        args = (X, rows, np.int32(nsteps), sink)
        for _ in range(2):
            fn((grid,), (128,), args, shared_mem=smem)
        cp.cuda.Device().synchronize()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        ts = []
        for _ in range(5):
            e0.record()
            fn((grid,), (128,), args, shared_mem=smem)
            e1.record()
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1))
        ms = float(np.median(ts))
        r = {"stages": S, "ctas_per_sm": k, "ms": ms, "tbs": grid * nsteps * 8192 / ms / 1e9}
        out.append(r)
        print(json.dumps({"probe": r}), flush=True)
    return out


def batched_section():
    rows = []
    batch, b = 10_000, 16
    for order, n in ((64, 64), (128, 128), (256, 256), (64, 16), (128, 32), (256, 32)):
        q = order // b
        g = torch.Generator(device="cuda").manual_seed(order + n)
        mask = torch.rand((q, q), device="cuda", generator=g) < 0.5
        ri, ci = torch.nonzero(mask, as_tuple=True)
        nnzb = ri.numel()
        val = torch.randn((batch, nnzb, b, b), device="cuda", generator=g).half()
        rp = torch.zeros(q + 1, dtype=torch.int64, device="cuda")
        rp[1:] = torch.cumsum(torch.bincount(ri, minlength=q), 0)
        A = BatchedBlockSparseMatrix(val, rp, ci.to(torch.int64), shape=(order, order))
        dense = A.to_dense().contiguous()
        X = torch.randn((batch, order, n), device="cuda", generator=g).half()
        row = {"order": order, "rhs": n, "nnzb": nnzb, "tile": batched_cuda.batched_tile_n(
            2, order, order, n, nnzb)}
        ours = lambda: spmm_batched(A, X, algorithm="blocksparse")  # noqa: E731
        prev = batched_cuda.batched_c_stage(0)
        old_out = ours()
        batched_cuda.batched_c_stage(prev)
        row["same_bits"] = bool(torch.equal(ours(), old_out))
        best = {}
        for _ in range(2):
            for nm, stage in (("old", 0), ("staged", 1)):
                prev = batched_cuda.batched_c_stage(stage)
                try:
                    best[nm] = min(best.get(nm, 1e9), cuda_time(ours))
                finally:
                    batched_cuda.batched_c_stage(prev)
            best["bmm"] = min(best.get("bmm", 1e9), cuda_time(lambda: torch.bmm(dense, X)))
        row["ms"] = best
        ours_bytes = batch * (nnzb * b * b + 2 * order * n) * 2
        bmm_bytes = batch * (order * order + 2 * order * n) * 2
        row["ratio"] = {k: best[k] / best["bmm"] for k in ("old", "staged")}
        row["tbs"] = {"old": ours_bytes / best["old"] / 1e9,
                      "staged": ours_bytes / best["staged"] / 1e9,
                      "bmm": bmm_bytes / best["bmm"] / 1e9}
        row["bytes_ratio"] = ours_bytes / bmm_bytes
        row["floor_hbm_ms"] = ours_bytes / HBM_TBS / 1e9
        row["floor_bmm_rate_ms"] = ours_bytes / row["tbs"]["bmm"] / 1e9
        row["achieved_over_floor_hbm"] = row["floor_hbm_ms"] / best["staged"]
        row["achieved_over_floor_bmm_rate"] = row["floor_bmm_rate_ms"] / best["staged"]
        row["err"] = rel(ours(), torch.bmm(dense.float(), X.float()))
        rows.append(row)
        print(json.dumps(row), flush=True)
        del A, X, dense, val, old_out
        torch.cuda.empty_cache()
    return rows


def ncu_run():
    """One launch of the panel kernel per variant at FP16 0.05 / 256 (ncu -k regex:panel)."""
    A = random_bsm(16384, 0.05, torch.float16, seed=50)
    X = torch.randn((16384, 256), device="cuda").half()
    for nm in ("old", "C+evictA", "C+evictA persistent"):
        with_opts(PANEL[nm], lambda: spmm(A, X, algorithm="blocksparse"))
        torch.cuda.synchronize()
        print("ncu variant", nm, PANEL[nm], flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="blocksparse_half.json")
    p.add_argument("--sections", default="spmm,probe,batched")
    p.add_argument("--ncu", action="store_true")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    if a.ncu:
        ncu_run()
        return
    res = {"device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d %H:%M")}
    for sec in a.sections.split(","):
        t0 = time.time()
        try:
            res[sec] = {"spmm": spmm_section, "probe": probe_section,
                        "batched": batched_section}[sec]()
        except Exception as e:  # report and go on: the other sections still come back
            print(f"section {sec} failed: {e!r}", file=sys.stderr, flush=True)
            res[sec + "_error"] = repr(e)
        print(f"-- {sec}: {time.time() - t0:.1f} s", flush=True)
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
