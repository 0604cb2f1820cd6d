"""Small problems on the natural-order tensor-core kron kernels (float64 DMMA, float16; bfloat16
shares float16's code but its mma) for compute-sanitizer on the GPU machine: every P, line and
column tiles, one to three steps, several passes, alpha and beta, partial line tiles.
    compute-sanitizer --tool racecheck python benchmarks/kron_mma_natural_sanitize.py \
        [dtypes] [extra]
extra (comma-separated): eight7 adds 1 x 8^7 (3 + 2 + 2 natural passes: the half types', and
float64's under KRONLINALG_KRON_NATURAL_SHORTER=1); ring adds the half types' ring kernel's
3-step P = 16 column pass of 16 i (1 x 16^6 in 3 + 3; its line passes, 3-step P = 32 and 4-step
P = 16, are in the base cases); ring64 its P = 32 column pass of 64 i (40 x 32^4: 640 tiles, it
takes 4 an SM at least), ring64p16 its P = 16 one (9 x 16^5), both under the default
KRONLINALG_KRON_NATURAL_RING_HALF=3.  (The H100 call of 2026-11-27 00:55 ran earlier shapes
for these three, which the planner gave no ring pass.)"""
import math
import re
import sys

import cupy as cp

import kronlinalg
from kronlinalg.testing import extension

dtypes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["float64", "float16"]
extra = sys.argv[2].split(",") if len(sys.argv) > 2 else []
cases = [([(8, 8)] * 3, 5), ([(8, 8)] * 5, 3), ([(16, 16)] * 3, 3), ([(16, 16)] * 4, 2),
         ([(32, 32)] * 2, 3), ([(32, 32)] * 3, 2), ([(64, 64)] * 2, 3), ([(64, 64)] * 3, 1)]
if "eight7" in extra:
    cases.append(([(8, 8)] * 7, 1))
if "ring" in extra:
    cases.append(([(16, 16)] * 6, 1))
if "ring64" in extra:
    cases.append(([(32, 32)] * 4, 40))
if "ring64p16" in extra:
    cases.append(([(16, 16)] * 5, 9))
rng = cp.random.default_rng(0)
for dtype in dtypes:
    for shapes, m in cases:
        fs = [(rng.standard_normal(s) / math.sqrt(s[0])).astype(dtype) for s in shapes]
        k = math.prod(p for p, _ in shapes)
        x = rng.standard_normal((m, k)).astype(dtype)
        y = rng.standard_normal((m, math.prod(q for _, q in shapes))).astype(dtype)
        kronlinalg.kron_matmul(x, fs, algorithm="sliced", alpha=0.5, beta=2.0, y=y)
        if any(e.startswith("ring") for e in extra):  # (which kernels ran)
            kc, nq = extension("kron_cuda"), math.prod(q for _, q in shapes)
            text = kc.config(1, m, [(0, p, q, q, 1) for p, q in shapes], (256, m * k, k, 1),
                             (256, m * nq, nq, 1), kc.DTYPES[dtype])
            print(dtype, m, shapes[0], len(shapes), re.findall(r"kernel=(\S+) L=(\d+)", text))
cp.cuda.Device().synchronize()
print("sanitize workload done", dtypes)
