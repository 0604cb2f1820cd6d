"""spmm / spgemm on the CPU against scipy.sparse (BSR @ dense, CSR @ CSR): best of 7 runs.

    OMP_NUM_THREADS=2 python benchmarks/blocksparse_cpu.py

N = 4096, 16 x 16 blocks, random block patterns; prints a markdown table."""

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
