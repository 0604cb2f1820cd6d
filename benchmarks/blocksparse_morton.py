"""Issue 34's open criteria in one run: "Morton pays" (the 2D kernel against the 1D panel kernel
on the patterns users have, and wide right-hand sides) and the batched 0.6x mark.

    python benchmarks/blocksparse_morton.py --out morton.json [--budget 150] [--sections ...]

Sections (each skipped once the budget is spent; the JSON is written after every one):

1. patterns: N = 16384 (and 4096: random 0.25, banded 0.05), 16 x 16 blocks, RHS 64 / 256,
   FP16 / FP32 / FP64, on random (0.05, 0.25), block-banded (|i - j| <= w, density 0.05 and
   0.1), block-diagonal plus noise (dense 32 x 32-block squares on the diagonal + 2 % random)
   and power-law rows (row weights rank^-0.7, random columns) patterns: the 1D panel kernel
   (row order), the 2D kernel on the Morton-order copy with its first options (0) and the new
   ones (C staged, B fragments once per step, deeper pipeline, 4-warp panels), dense torch.mm;
   the pattern's reuse (blocks per 2D step), what the planner picks and the auto call's time;
   errors against float64.
2. wide: random 0.05 and banded 0.05, FP16, RHS 1024 / 4096: the 1D kernel with the grid
   RHS-tile-fastest (before) and strip-major, the 2D kernel likewise, dense.
3. batched: spmm_batched, FP16, batch 10^4, patterns of exactly 50 % of the blocks, orders
   64 / 128 / 256 at narrow right-hand sides (order / 16, order / 8, and the doc's 16 / 32 / 32)
   against torch.bmm; the bytes ratio (A's stored blocks + X + C over dense A + X + C).
ms = CUDA events around 10 back-to-back calls, median of 3 batches; in the patterns section
both whole spmm calls ("ms") and the launches alone ("kernel_ms": the extension call with the
arrays uploaded once, as the fast path of repeated calls does for the 1D kernel).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import kronlinalg
from kronlinalg import BatchedBlockSparseMatrix, BlockSparseMatrix, spmm, spmm_batched
from kronlinalg.blocksparse import bs_cuda

from blocksparse_gpu import cuda_time, rel  # (the timing and error the other block-sparse scripts use)

START = time.time()
DT = {"fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
PANEL_DEFAULT = bs_cuda.spmm_panel_opts()
TWOD_DEFAULT = bs_cuda.spmm2d_opts()
STRIP, FORCE = 4, 1 << 16  # kPanelStripMajor (both kernels' options); kStripForce
# the 2D kernel's option sets: "2d_old" the kernel before this session (no option), "2d_c" C
# staged (FP16 rows only), "2d_new" C staged + B fragments once per step + strip-major,
# "2d_deep" that with 10 stages (half precision; 4-byte types 5), "2d_nw4" 2d_new with 8-row
# panels of 4 warps (64-column tiles, 4 CTAs an SM; FP16 rows only), "2d_f64w" FP64's 4-row
# panels with 8 warps (128-column tiles; FP64 rows at 256 columns)
TWOD = {"2d_old": 0, "2d_c": 1 | STRIP, "2d_new": 1 | 2 | STRIP,
        "2d_deep": 1 | 2 | STRIP | (10 << 4), "2d_nw4": 1 | 2 | STRIP | (1 << 8),
        "2d_f64w": 1 | 2 | STRIP | (1 << 9)}


SEED, VARIANTS = 0, ()  # (--seed, --variants)


def with_opts(panel, twod, fn):
    p, t = bs_cuda.spmm_panel_opts(panel), bs_cuda.spmm2d_opts(twod)
    try:
        return fn()
    finally:
        bs_cuda.spmm_panel_opts(p)
        bs_cuda.spmm2d_opts(t)


def mask_of(kind, R, d, g):
    i = torch.arange(R, device="cuda")
    if kind == "random":
        return torch.rand((R, R), device="cuda", generator=g) < d
    if kind == "banded":
        w = max(0, round((d * R - 1) / 2))
        return (i[:, None] - i[None, :]).abs() <= w
    if kind == "blockdiag":  # 32 x 32-block dense squares on the diagonal, the rest random
        q = 32
        noise = max(0.0, d - q / R)
        return ((i[:, None] // q) == (i[None, :] // q)) | (
            torch.rand((R, R), device="cuda", generator=g) < noise)
    if kind == "powerlaw":  # row weights rank^-0.7 (ranks shuffled), columns uniform
        rank = torch.randperm(R, device="cuda", generator=g).double() + 1
        w = rank ** -0.7
        p = (d * R * w / w.sum()).clamp(max=1.0)
        return torch.rand((R, R), device="cuda", generator=g, dtype=torch.float64) < p[:, None]
    raise ValueError(kind)


def bsm(mask, dtype, g, b=16):
    R, C = mask.shape
    rows, cols = torch.nonzero(mask, as_tuple=True)
    val = torch.randn((rows.numel(), b, b), device="cuda", generator=g).to(dtype)
    rp = torch.zeros(R + 1, dtype=torch.int64, device="cuda")
    rp[1:] = torch.cumsum(torch.bincount(rows, minlength=R), 0)
    return BlockSparseMatrix(val, rp, cols.to(torch.int64), shape=(R * b, C * b))


CODE = {torch.float16: 2, torch.bfloat16: 3, torch.float32: 0, torch.float64: 1}


def kernel_1d(A, X, out, order="longest"):
    """The 1D launch alone (the arrays spmm would pass, uploaded once): its time without the
    ~20-50 us of Python a spmm call costs, which hides a kernel of that length in a loop.
    `order`: the work list's (A.work_items)."""
    m, k = A.shape
    n = X.shape[1]
    items, split = A.work_items(32, order=order)
    rp, cols, perm = A.host_structure()
    dev = [torch.from_numpy(a).cuda() for a in (rp, cols, items)]
    dperm = torch.from_numpy(perm).cuda() if perm is not None else None
    ptrs = (dev[0].data_ptr(), dev[1].data_ptr(), dperm.data_ptr() if dperm is not None else 0,
            A.val.data_ptr(), X.data_ptr(), out.data_ptr(), dev[2].data_ptr())
    stream = torch.cuda.current_stream().cuda_stream

    def run():
        if split:
            out.zero_()  # pieces of a cut row are added atomically (as spmm does)
        bs_cuda.spmm((m, k, n, 16), ptrs, (n, n), 1.0, 0.0, items.size // 3, int(split),
                     CODE[X.dtype], stream)
    run.keep = (dev, dperm)
    return run


def kernel_2d(A, X, out):
    """The 2D launch alone (A.row_steps uploaded once), as kernel_1d."""
    m, k = A.shape
    n = X.shape[1]
    P = bs_cuda.spmm2d_rows(CODE[X.dtype], n)
    ptr_h, steps_h, panels = A.row_steps(P)
    dptr, dsteps = torch.from_numpy(ptr_h).cuda(), torch.from_numpy(steps_h).cuda()
    ptrs = (0, 0, 0, A.val.data_ptr(), X.data_ptr(), out.data_ptr(), 0)
    tptrs = (dptr.data_ptr(), dsteps.data_ptr(), 0)
    stream = torch.cuda.current_stream().cuda_stream

    def run():
        bs_cuda.spmm2d((m, k, n, 16), ptrs, (n, n), 1.0, 0.0, 0, P, panels, tptrs,
                       CODE[X.dtype], stream)
    run.keep = (dptr, dsteps)
    return run


def plan_of(A, X, dt):
    n = X.shape[1]
    P = bs_cuda.spmm2d_rows({"float16": 2, "bfloat16": 3, "float32": 0, "float64": 1}[dt], n)
    got = kronlinalg.plan("spmm", A.shape, (A.shape[1], n), dtype=dt, device=X, block=16,
                          nnzb=A.nnz_blocks, skew=1.0, lib="torch", beta=0, order="row", tile=0,
                          reuse=round(A.panel_reuse(P), 2))
    return got[0].name, P, {c.name: c.seconds * 1e3 for c in got}


ALL = ("fp16", "fp32", "fp64")
PATTERN_CASES = [  # (N, pattern, density, dtypes), most telling first; N = 4096 for auto's sake
    (16384, "banded", 0.05, ALL), (16384, "random", 0.05, ALL), (16384, "blockdiag", 0.05, ALL),
    (16384, "random", 0.25, ALL), (4096, "banded", 0.05, ("fp16", "fp32")),
    (4096, "random", 0.25, ("fp16", "fp32")), (16384, "banded", 0.1, ("fp16",)),
    (16384, "powerlaw", 0.05, ("fp16",)),
]


def patterns_section(budget):
    rows = []
    for N, kind, d, dtypes in PATTERN_CASES:
        for dname in dtypes:
            if time.time() - START > budget:
                return rows
            dt = DT[dname]
            g = torch.Generator(device="cuda").manual_seed(int(d * 1000) + len(kind) + SEED)
            A = bsm(mask_of(kind, N // 16, d, g), dt, g)
            Am = A.with_order("morton")
            dense = A.to_dense()
            for n in (64, 256):
                X = torch.randn((N, n), device="cuda", generator=g).to(dt)
                ref = dense.double() @ X.double()
                auto, P, predicted = plan_of(A, X, str(dt).split(".")[-1])
                row = {"N": N, "pattern": kind, "density": round(A.density, 4), "dtype": dname,
                       "rhs": n, "nnzb": A.nnz_blocks, "P": P, "reuse": A.panel_reuse(P),
                       "skew": float(A.row_counts().max() / max(1e-9, A.row_counts().mean())),
                       "auto": auto, "predicted_ms": predicted, "ms": {}, "err": {}}
                ms, err, kern = row["ms"], row["err"], {}
                row["kernel_ms"] = kern
                ms["1d"] = cuda_time(lambda: spmm(A, X, algorithm="blocksparse"))
                err["1d"] = rel(spmm(A, X, algorithm="blocksparse"), ref)
                out = torch.full((N, n), float("nan"), device="cuda", dtype=dt)
                k1 = kernel_1d(A, X, out)
                kern["1d"] = cuda_time(k1)
                err["1d_kernel"] = rel(out, ref)
                k2 = kernel_2d(Am, X, out)
                outs = {}
                for name, opts in TWOD.items():
                    if VARIANTS and name not in VARIANTS:
                        continue
                    if (name == "2d_deep" and dname == "fp64") or (
                            name in ("2d_c", "2d_nw4") and dname != "fp16") or (
                            name == "2d_f64w" and (dname != "fp64" or n <= 64)):
                        continue  # FP64: one depth, its own 8-warp form; C, 4 warps: half
                    f = lambda: spmm(Am, X, algorithm="morton")  # noqa: E731
                    ms[name] = with_opts(PANEL_DEFAULT, opts, lambda: cuda_time(f))
                    outs[name] = with_opts(PANEL_DEFAULT, opts, f)
                    err[name] = rel(outs[name], ref)
                    out.fill_(float("nan"))
                    kern[name] = with_opts(PANEL_DEFAULT, opts, lambda: cuda_time(k2))
                    err[name + "_kernel"] = rel(out, ref)
                first = next(iter(outs.values()))
                row["same_bits_2d"] = all(torch.equal(first, o) for o in outs.values())
                ms["2d_row_order"] = cuda_time(lambda: spmm(A, X, algorithm="morton"))
                ms["dense"] = cuda_time(lambda: dense @ X)
                ms["auto"] = cuda_time(lambda: spmm(A, X))
                err["auto"] = rel(spmm(A, X), ref)
                best2d = min(v for k, v in kern.items() if k.startswith("2d_") and k != "2d_old")
                row["x_2d_over_1d"] = kern["1d"] / best2d  # kernel times
                row["x_2d_default_over_1d"] = ms["1d"] / ms["2d_row_order"]
                rows.append(row)
                print(json.dumps(row), flush=True)
                del X, ref, out, k1, k2
            del A, Am, dense
            torch.cuda.empty_cache()
    return rows


def wide_section(budget, N=16384):
    rows = []
    for kind, n in (("random", 1024), ("random", 4096), ("banded", 4096)):
        if time.time() - START > budget:
            return rows
        g = torch.Generator(device="cuda").manual_seed(n)
        A = bsm(mask_of(kind, N // 16, 0.05, g), torch.float16, g)
        dense = A.to_dense()
        X = torch.randn((N, n), device="cuda", generator=g).to(torch.float16)
        ref = dense.double() @ X[:, :128].double()
        auto, P, predicted = plan_of(A, X, "float16")
        row = {"pattern": kind, "dtype": "fp16", "rhs": n, "nnzb": A.nnz_blocks, "P": P,
               "reuse": A.panel_reuse(P), "auto": auto, "predicted_ms": predicted, "ms": {},
               "err": {}}
        ms, err = row["ms"], row["err"]
        one = lambda: spmm(A, X, algorithm="blocksparse")  # noqa: E731
        two = lambda: spmm(A, X, algorithm="morton")  # noqa: E731
        strip = STRIP | FORCE  # strip-major whatever X's size, to compare both orders
        for name, panel, twod, f in (("1d_tile_fastest", PANEL_DEFAULT & ~STRIP, 0, one),
                                     ("1d_strip_major", PANEL_DEFAULT | strip, 0, one),
                                     ("2d_old", PANEL_DEFAULT, 0, two),
                                     ("2d_new_tile_fastest", PANEL_DEFAULT, 3, two),
                                     ("2d_new", PANEL_DEFAULT, 3 | strip, two),
                                     ("2d_deep", PANEL_DEFAULT, 3 | strip | (10 << 4), two)):
            ms[name] = with_opts(panel, twod, lambda: cuda_time(f, reps=5))
            err[name] = rel(with_opts(panel, twod, f)[:, :128], ref)
        ms["dense"] = cuda_time(lambda: dense @ X, reps=5)
        ms["auto"] = cuda_time(lambda: spmm(A, X), reps=5)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del A, dense, X, ref
        torch.cuda.empty_cache()
    return rows


def batched_section(budget):
    """Exactly half of the blocks stored (a random choice), FP16, batch 10^4."""
    rows = []
    batch, b = 10_000, 16
    for order, n in ((256, 8), (256, 4), (128, 4), (64, 4), (256, 16), (128, 8), (64, 8),
                     (128, 16), (256, 32), (128, 32), (64, 16), (256, 256)):
        if time.time() - START > budget:
            return rows
        q = order // b
        g = torch.Generator(device="cuda").manual_seed(order * 7 + n)
        pick = torch.randperm(q * q, device="cuda", generator=g)[: q * q // 2]
        mask = torch.zeros(q * q, dtype=torch.bool, device="cuda")
        mask[pick] = True
        ri, ci = torch.nonzero(mask.reshape(q, q), as_tuple=True)
        nnzb = ri.numel()
        val = torch.randn((batch, nnzb, b, b), device="cuda", generator=g).half()
        rp = torch.zeros(q + 1, dtype=torch.int64, device="cuda")
        rp[1:] = torch.cumsum(torch.bincount(ri, minlength=q), 0)
        A = BatchedBlockSparseMatrix(val, rp, ci.to(torch.int64), shape=(order, order))
        dense = A.to_dense().contiguous()
        X = torch.randn((batch, order, n), device="cuda", generator=g).half()
        row = {"batch": batch, "order": order, "rhs": n, "nnzb": nnzb,
               "density": nnzb / (q * q)}
        row["ours_ms"] = cuda_time(lambda: spmm_batched(A, X, algorithm="blocksparse"))
        if n <= 16:  # the narrow forms (bs_cuda.batched_narrow): 0 = the kernel before them
            row["forms_ms"] = {}
            prev = bs_cuda.batched_narrow()
            try:
                for forms in (0, 1, 2, 3):
                    bs_cuda.batched_narrow(forms)
                    row["forms_ms"][forms] = cuda_time(
                        lambda: spmm_batched(A, X, algorithm="blocksparse"))
            finally:
                bs_cuda.batched_narrow(prev)
        row["bmm_ms"] = cuda_time(lambda: torch.bmm(dense, X))
        # the other dense baseline the issue names: our own batched_matmul on the dense stack
        row["batched_matmul_ms"] = cuda_time(lambda: kronlinalg.batched_matmul(dense, X))
        row["auto_ms"] = cuda_time(lambda: spmm_batched(A, X))
        row["ratio"] = row["ours_ms"] / row["bmm_ms"]
        row["ratio_best_dense"] = row["ours_ms"] / min(row["bmm_ms"], row["batched_matmul_ms"])
        ours_bytes = batch * (nnzb * b * b + 2 * order * n) * 2
        bmm_bytes = batch * (order * order + 2 * order * n) * 2
        row["bytes_ratio"] = ours_bytes / bmm_bytes
        row["ours_tbs"] = ours_bytes / row["ours_ms"] / 1e9
        row["bmm_tbs"] = bmm_bytes / row["bmm_ms"] / 1e9
        ref = torch.bmm(dense.float(), X.float())
        row["err_ours"] = rel(spmm_batched(A, X, algorithm="blocksparse"), ref)
        row["err_bmm"] = rel(torch.bmm(dense, X), ref)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del A, dense, X, val, ref
        torch.cuda.empty_cache()
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="morton.json")
    p.add_argument("--budget", type=float, default=150.0)
    p.add_argument("--sections", default="patterns,wide,batched")
    p.add_argument("--seed", type=int, default=0,
                   help="added to each pattern's seed: other matrices of the same classes")
    p.add_argument("--variants", default="",
                   help="the 2D option sets to time (comma-separated names of TWOD; all)")
    args = p.parse_args()
    global SEED, VARIANTS
    SEED, VARIANTS = args.seed, tuple(v for v in args.variants.split(",") if v)
    chosen = args.sections.split(",")
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                        time.gmtime())}
    share = {"patterns": 0.6, "wide": 0.15, "batched": 0.25}
    spent = 0.0
    for name in chosen:
        spent += share.get(name, 1.0 / len(chosen))
        fn = {"patterns": patterns_section, "wide": wide_section,
              "batched": batched_section}[name]
        res[name] = fn(args.budget * min(1.0, spent / sum(share[c] for c in chosen)))
        json.dump(res, open(args.out, "w"), indent=1)
    for r in res.get("patterns", []):
        ms = r["kernel_ms"]
        print(f"| {r['N']} {r['pattern']} | {r['density']} | {r['dtype']} | {r['rhs']} | "
              f"{r['reuse']:.2f} | kernels "
              + " | ".join(f"{k}={v:.4g}" for k, v in ms.items())
              + f" | call 1d={r['ms']['1d']:.4g} auto={r['ms']['auto']:.4g}"
              + f" | {r['auto']} | x2d {r['x_2d_over_1d']:.2f} | bits {r['same_bits_2d']} | "
              f"maxerr {max(r['err'].values()):.1e}")
    for r in res.get("wide", []):
        print(f"| wide {r['pattern']} | {r['rhs']} | {r['reuse']:.2f} | "
              + " | ".join(f"{k}={v:.4g}" for k, v in r["ms"].items()) + f" | {r['auto']} |")
    for r in res.get("batched", []):
        forms = " ".join(f"f{f}={v:.4g}" for f, v in r.get("forms_ms", {}).items())
        print(f"| batched {r['order']} | {r['rhs']} | {r['nnzb']} | ours {r['ours_ms']:.4g} | "
              f"{forms} | "
              f"bmm {r['bmm_ms']:.4g} | batched_matmul {r['batched_matmul_ms']:.4g} | "
              f"ratio {r['ratio']:.3f} (best dense {r['ratio_best_dense']:.3f}) | "
              f"bytes {r['bytes_ratio']:.3f} | "
              f"TB/s {r['ours_tbs']:.2f}/{r['bmm_tbs']:.2f} | auto {r['auto_ms']:.4g} | "
              f"err {r['err_ours']:.1e}")


if __name__ == "__main__":
    main()
