"""spmm / spgemm on the CPU against scipy.sparse (BSR @ dense, CSR @ CSR): best of 7 runs.

    OMP_NUM_THREADS=2 python benchmarks/blocksparse_cpu.py

N = 4096, 16 x 16 blocks, random block patterns; prints a markdown table.  Then spmm_batched
(one shared pattern, 50 % block density) against NumPy's batched matmul of the dense stack:
FP64 and FP32, batch 2000 (300 at order 256), best of 5."""

import time

import numpy as np

import kronlinalg
from kronlinalg import BlockSparseMatrix


def best(fn, reps=7):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts) * 1e3


rng = np.random.default_rng(0)
N, b = 4096, 16
print("| op | density | rhs | ours ms | scipy ms | scipy / ours |\n|---|---|---|---|---|---|")
for density in (0.05, 0.1):
    R = N // b
    a = np.kron(rng.random((R, R)) < density, np.ones((b, b))) * rng.standard_normal((N, N))
    A = BlockSparseMatrix.from_dense(a, block=b)
    bsr = A.to_scipy("bsr")
    for n in (64, 256):
        x = rng.standard_normal((N, n))
        ours = best(lambda: kronlinalg.spmm(A, x, algorithm="blocksparse"))
        ref = best(lambda: bsr @ x)
        print(f"| spmm | {density} | {n} | {ours:.2f} | {ref:.2f} | {ref / ours:.1f} |")
for density in (0.01, 0.03):
    R = N // b
    a = np.kron(rng.random((R, R)) < density, np.ones((b, b))) * rng.standard_normal((N, N))
    A = BlockSparseMatrix.from_dense(a, block=b)
    csr = A.to_scipy("csr")
    ours = best(lambda: kronlinalg.spgemm(A, A, algorithm="blocksparse"), reps=3)
    ref = best(lambda: csr @ csr, reps=3)
    print(f"| spgemm | {density} | — | {ours:.2f} | {ref:.2f} | {ref / ours:.1f} |")

print("\n| spmm_batched | order | rhs | ours ms | gather ms | numpy ms | numpy / ours | auto |")
print("|---|---|---|---|---|---|---|---|")
for dtype in ("float64", "float32"):
    for order, n in ((64, 64), (128, 128), (128, 32), (256, 64)):
        batch, q = (2000 if order < 256 else 300), order // b
        mask = rng.random((q, q)) < 0.5
        a = (np.kron(mask, np.ones((b, b)))[None]
             * rng.standard_normal((batch, order, order))).astype(dtype)
        x = rng.standard_normal((batch, order, n)).astype(dtype)
        A = kronlinalg.BatchedBlockSparseMatrix.from_dense(a)
        ours = best(lambda: kronlinalg.spmm_batched(A, x, algorithm="blocksparse"), reps=5)
        gather = best(lambda: kronlinalg.spmm_batched(A, x, algorithm="gather"), reps=2)
        ref = best(lambda: a @ x, reps=5)
        auto = kronlinalg.plan("spmm_batched", a.shape, x.shape, dtype=dtype, block=b,
                               nnzb=A.nnz_blocks, lib="numpy")[0].name
        print(f"| {dtype} | {order} | {n} | {ours:.2f} | {gather:.2f} | {ref:.2f} | "
              f"{ref / ours:.1f} | {auto} |")
