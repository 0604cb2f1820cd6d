"""Small natural-order float32 kron problems for compute-sanitizer on the GPU machine: line and
column tiles of P = 8, 16, 32, several passes, alpha and beta, partial line tiles; the ring
kernel's P = 32 line tiles (32^3, also more tiles than blocks), P = 16 column tiles (16^6) and
P = 32 column tiles of 32 i (32^4 with 17 rows: the fewest that take them).
    compute-sanitizer --tool racecheck python benchmarks/kron_natural_sanitize.py
(KRONLINALG_KRON_NATURAL_TI_MIN=4 adds 3-step P = 16 groups on column tiles of 4 i.)"""
import math

import cupy as cp

import kronlinalg

rng = cp.random.default_rng(0)
for shapes, m in [([(8, 8)] * 6, 1), ([(8, 8)] * 3 + [(1, 8)], 3), ([(32, 32)] * 3, 2),
                  ([(16, 16)] * 3 + [(1, 8)], 3), ([(16, 16)] * 6, 1), ([(16, 16)] * 2, 37),
                  ([(32, 32)] * 3, 140), ([(32, 32)] * 4, 17)]:
    fs = [rng.standard_normal(s, dtype=cp.float32) for s in shapes]
    k, n = math.prod(p for p, _ in shapes), math.prod(q for _, q in shapes)
    x = rng.standard_normal((m, k), dtype=cp.float32)
    y = rng.standard_normal((m, n), dtype=cp.float32)
    kronlinalg.kron_matmul(x, fs, algorithm="sliced", alpha=0.5, beta=2.0, y=y)
cp.cuda.Device().synchronize()
