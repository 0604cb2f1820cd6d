"""Small spmm / spgemm calls over every CUDA kernel instantiation, for compute-sanitizer:

    compute-sanitizer --tool memcheck python benchmarks/blocksparse_sanitize.py

Dtypes FP16/BF16/FP32 (3xTF32, IEEE)/FP64, b = 16 and 32, RHS tiles 32/64/128, row and Morton
order, shapes not divisible by b, empty rows, a heavy row cut into pieces (atomics), beta, the
three SpGEMM phases, the batched kernel (spmm_batched: every RHS tile, edge blocks, an empty
pattern).  Exits non-zero on a wrong answer.  ``--quick`` (for racecheck): FP16 and FP32,
b = 16, the panel and 2D kernels' tiles only; ``--batched``: the batched kernel only; ``--panel``:
the half-precision panel kernel's options only; ``--twod``: the 2D kernel's options and the
strip-major grids only (flags combine)."""

import sys

import numpy as np
import torch

from kronlinalg import BatchedBlockSparseMatrix, BlockSparseMatrix, spgemm, spmm, spmm_batched
from kronlinalg.blocksparse import float32_precision
from kronlinalg.blocksparse_batched import bs_cuda as batched_cuda

rng = np.random.default_rng(0)
bad = 0


def pattern(m, n, b, d):
    R, C = -(-m // b), -(-n // b)
    mask = rng.random((R, C)) < d
    mask[R // 2] = False
    a = np.kron(mask, np.ones((b, b))) * rng.standard_normal((R * b, C * b))
    return a[:m, :n]


def check(got, ref, tol, what):
    global bad
    got = got.double().cpu().numpy()
    err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    if not err <= tol:
        bad += 1
        print("WRONG", what, err)


def batched_calls():
    """The batched kernel at each RHS tile (16 / 32 / 64 columns), FP16 and BF16, orders 48
    (edge-free), 40 x 70 (edge blocks), 256, an odd batch, an empty pattern, in its pipelines
    (2-4 stages; two) with C staged and not; then narrow right-hand sides in each form
    (batched_narrow: the 8-column tile, n = 4 unpadded, bulk loads; k not a multiple of 16: X's
    zero rows)."""
    wide = ((48, 48, 8, 0.5), (40, 70, 40, 0.6), (256, 256, 64, 0.5), (128, 128, 128, 0.5),
            (64, 64, 24, 0.0))
    narrow = ((256, 256, 8, 0.5), (40, 50, 4, 0.5), (128, 120, 8, 0.5), (64, 64, 16, 0.5),
              (48, 40, 1, 0.5))
    # (pipeline, C staged, narrow forms) of each case
    settings = {wide: ((0, 1, 3), (1, 1, 3), (0, 0, 3)),
                narrow: ((0, 1, 3), (0, 0, 3), (0, 1, 1), (0, 1, 0))}
    knobs = (batched_cuda.batched_pipeline, batched_cuda.batched_c_stage,
             batched_cuda.batched_narrow)
    for dt in (torch.float16, torch.bfloat16):
        for cases, values in settings.items():
            for (m, k, n, d) in cases:
                batch = 3
                R, C = -(-m // 16), -(-k // 16)
                mask = rng.random((R, C)) < d
                a = np.kron(mask, np.ones((16, 16)))[None] * rng.standard_normal(
                    (batch, R * 16, C * 16))
                A = BatchedBlockSparseMatrix.from_dense(
                    torch.from_numpy(a[:, :m, :k]).to("cuda", dt))
                x = torch.randn((batch, k, n), device="cuda").to(dt)
                ref = A.to_dense().double().cpu().numpy() @ x.double().cpu().numpy()
                for value in values:
                    prev = [set_(v) for set_, v in zip(knobs, value)]
                    check(spmm_batched(A, x, algorithm="blocksparse"), ref, TOL[dt],
                          ("batched", dt, m, k, n) + value)
                    for set_, v in zip(knobs, prev):
                        set_(v)
    print("done batched", flush=True)


def panel_calls():
    """The half-precision panel kernel's options (C staged or not, A evict-first or not, 4 / 8 /
    12 stages, persistent with and without a grid cap) at 256-column tiles: edge blocks, an
    empty row, a row cut into pieces, beta."""
    from kronlinalg.blocksparse import bs_cuda
    light = pattern(150, 600, 16, 0.1)  # block row 4 empty
    heavy = light.copy()
    heavy[16:32] = rng.standard_normal((16, 600))  # 38 blocks: cut into pieces (nothing staged)
    for dt, a in ((torch.float16, light), (torch.float16, heavy), (torch.bfloat16, light)):
        A = BlockSparseMatrix.from_dense(torch.from_numpy(a).to("cuda", dt))
        ae = A.to_dense().double().cpu().numpy()
        for n in (136, 256, 258):
            x = torch.randn((600, n), device="cuda").to(dt)
            xe = x.double().cpu().numpy()
            c = torch.randn((150, n), device="cuda").to(dt)
            for opts in (0 | 4 << 4, 3 | 4 << 4, 3 | 8 << 4, 1 | 12 << 4, 11 | 4 << 4,
                         11 | 4 << 4 | 3 << 8, 8 | 4 << 4 | 2 << 8):  # persistent, capped
                prev = bs_cuda.spmm_panel_opts(opts)
                check(spmm(A, x, algorithm="blocksparse"), ae @ xe, TOL[dt], ("panel", dt, n, opts))
                check(spmm(A, x, beta=0.5, c=c, algorithm="blocksparse"),
                      ae @ xe + 0.5 * c.double().cpu().numpy(), TOL[dt], ("panel beta", dt, n))
                bs_cuda.spmm_panel_opts(prev)
    print("done panel", flush=True)


def twod_calls():
    """The 2D kernel's options (none, C staged, B fragments once per step, strip-major forced,
    10 / 5 stages) and the panel kernel's strip-major grid (forced), FP16/BF16/FP32/FP64, on a
    banded pattern plus noise with edge blocks and an empty block row, 2-3 RHS tiles, beta."""
    from kronlinalg.blocksparse import bs_cuda
    m, k = 16 * 21 - 3, 16 * 19 - 5
    R, C = -(-m // 16), -(-k // 16)
    mask = (np.abs(np.arange(R)[:, None] - np.arange(C)[None, :]) <= 2) | (rng.random((R, C)) < 0.1)
    mask[5] = False
    a = (np.kron(mask, np.ones((16, 16))) * rng.standard_normal((R * 16, C * 16)))[:m, :k]
    force, strip = 1 << 16, 4
    prev_2d, prev_panel = bs_cuda.spmm2d_opts(), bs_cuda.spmm_panel_opts()
    for dt in DTYPES:  # --quick (racecheck): FP16 and FP32
        A = BlockSparseMatrix.from_dense(torch.from_numpy(a).to("cuda", dt), order="morton")
        ae = A.to_dense().double().cpu().numpy()
        ns = (136,) if QUICK else (100, 257) if dt == torch.float64 else (136, 257)
        for n in ns:  # C staged at 136 (n % 8 == 0), 2-3 RHS tiles
            x = torch.randn((k, n), device="cuda").to(dt)
            xe = x.double().cpu().numpy()
            c = torch.randn((m, n), device="cuda").to(dt)
            runs = [("morton", o, prev_panel) for o in
                    (0, 1, 2, 3, 3 | strip | force, 3 | 10 << 4, 3 | strip | force | 5 << 4,
                     3 | 1 << 8, 3 | 1 << 9)]
            runs.append(("blocksparse", prev_2d, prev_panel | strip | force))
            for algorithm, o2d, opanel in runs:
                bs_cuda.spmm2d_opts(o2d)
                bs_cuda.spmm_panel_opts(opanel)
                check(spmm(A, x, alpha=-1.5, algorithm=algorithm), -1.5 * (ae @ xe), TOL[dt],
                      ("2d opts", dt, n, algorithm, o2d, opanel))
                check(spmm(A, x, beta=0.5, c=c, algorithm=algorithm),
                      ae @ xe + 0.5 * c.double().cpu().numpy(), TOL[dt], ("2d beta", dt, n))
    bs_cuda.spmm2d_opts(prev_2d)
    bs_cuda.spmm_panel_opts(prev_panel)
    print("done 2d", flush=True)


TOL = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5, torch.float64: 1e-12}
QUICK = "--quick" in sys.argv
DTYPES = (torch.float16, torch.float32) if QUICK else (torch.float16, torch.bfloat16,
                                                        torch.float32, torch.float64)
if "--panel" in sys.argv or "--batched" in sys.argv or "--twod" in sys.argv:
    if "--twod" in sys.argv:
        twod_calls()
    if "--panel" in sys.argv:
        panel_calls()
    if "--batched" in sys.argv:
        batched_calls()
    torch.cuda.synchronize()
    print("blocksparse sanitize run:", "OK" if bad == 0 else f"{bad} wrong")
    raise SystemExit(1 if bad else 0)
SHAPES = ((64, 130, 130), (40, 70, 60)) if QUICK else ((70, 90, 5), (64, 130, 130), (40, 70, 60))
for dt in DTYPES:
    for b in ((16,) if QUICK else (16, 32)):
        for (m, k, n) in SHAPES:
            a = pattern(m, k, b, 0.4)
            for order in ("row", "morton"):
                A = BlockSparseMatrix.from_dense(torch.from_numpy(a).to("cuda", dt), block=b,
                                                 order=order)
                ae = A.to_dense().double().cpu().numpy()
                x = torch.randn((k, n), device="cuda").to(dt)
                xe = x.double().cpu().numpy()
                modes = ("tf32x3", "ieee") if dt == torch.float32 else (None,)
                for mode in modes:
                    if mode:
                        float32_precision(mode)
                    check(spmm(A, x, algorithm="blocksparse"), ae @ xe, TOL[dt], (dt, b, m, k, n))
                    if b == 16:  # the 2D kernel (4- and 8-row panels by n)
                        check(spmm(A, x, algorithm="morton"), ae @ xe, TOL[dt], ("2d", dt, b, m))
                    c = torch.randn((m, n), device="cuda").to(dt)
                    check(spmm(A, x, beta=0.5, c=c, algorithm="blocksparse"),
                          ae @ xe + 0.5 * c.double().cpu().numpy(), TOL[dt], ("beta", dt, b))
                float32_precision("tf32x3")
        if QUICK:
            continue
        # a heavy row (80 blocks against a mean of ~4): cut into pieces added atomically
        h = pattern(4 * b, 80 * b - 3, b, 0.02)
        h[:b, :] = rng.standard_normal((b, h.shape[1]))
        A = BlockSparseMatrix.from_dense(torch.from_numpy(h).to("cuda", dt), block=b)
        x = torch.randn((h.shape[1], 3), device="cuda").to(dt)
        check(spmm(A, x, algorithm="blocksparse"),
              A.to_dense().double().cpu().numpy() @ x.double().cpu().numpy(), TOL[dt],
              ("heavy", dt, b))
        bb = pattern(90, 50, b, 0.5)
        A = BlockSparseMatrix.from_dense(torch.from_numpy(pattern(70, 90, b, 0.4)).to("cuda", dt),
                                         block=b, order="morton")
        B = BlockSparseMatrix.from_dense(torch.from_numpy(bb).to("cuda", dt), block=b)
        C = spgemm(A, B, algorithm="blocksparse")
        ref = A.to_dense().double().cpu().numpy() @ B.to_dense().double().cpu().numpy()
        check(C.to_dense(), ref, TOL[dt], ("spgemm", dt, b))
        print("done", dt, b, flush=True)
if not QUICK:
    batched_calls()
torch.cuda.synchronize()
print("blocksparse sanitize run:", "OK" if bad == 0 else f"{bad} wrong")
raise SystemExit(1 if bad else 0)
