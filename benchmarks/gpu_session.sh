#!/bin/bash
# One device call: GPU tests, sanitizer on small kron/KS cases, demo, kron benchmark.
# Run on the GPU machine as: bash .wheelhouse/gpu-run.sh bash benchmarks/gpu_session.sh
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=benchmarks/data
python -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.txt" | tail -25
cat > /tmp/san.py <<'PY'
import cupy as cp, numpy as np, kronlinalg
rng = np.random.default_rng(0)
for shapes, m in [([(8, 8)] * 3, 5), ([(3, 5), (7, 2), (4, 4)], 7), ([(16, 16)] * 2, 33), ([(2, 2)] * 10, 4)]:
    fs = [cp.asarray(rng.standard_normal(s), dtype=cp.float32) for s in shapes]
    k = int(np.prod([s[0] for s in shapes])); l = int(np.prod([s[1] for s in shapes]))
    x = cp.asarray(rng.standard_normal((m, k)), dtype=cp.float32)
    kronlinalg.kron_matmul(x, fs, algorithm="sliced")
    kronlinalg.kron_matmul(cp.asarray(rng.standard_normal((l, m)), dtype=cp.float32), fs, side="left", algorithm="sliced")
cp.cuda.Device().synchronize(); print("sanitizer script done")
PY
for tool in memcheck racecheck; do
  timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 python /tmp/san.py 2>&1 | tail -4 | tee -a "$OUT/sanitizer.txt"
done
python -m kronlinalg demo 2>&1 | tee "$OUT/demo_gpu.txt"
timeout 300 python benchmarks/kron_gpu_compare.py --cases $D/cases.json --anchors $D/h100-anchors-2026-11-22.json --json "$OUT/kron_gpu.json" 2>&1 | tee "$OUT/kron_gpu.txt" | tail -45
