#!/bin/bash
# One device call running the named steps (default: all), each under its own time limit, so
# that what finished comes back even when a later step runs long.
#   bash .wheelhouse/gpu-run.sh bash benchmarks/gpu_session.sh tests sanitizer demo kron
# Steps: tests sanitizer calibrate demo overhead kron planner structured cluster
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=benchmarks/data
export KRONLINALG_CACHE_DIR=$OUT/kl-cache
steps=${*:-tests sanitizer calibrate demo kron planner structured}

step_tests() {
  timeout 300 python -m pytest -q -m gpu -p no:cacheprovider -rf tests 2>&1 \
    | tee "$OUT/gpu_tests.txt" | tail -40
}

step_sanitizer() {
  cat > /tmp/san.py <<'PY'
import cupy as cp, numpy as np, kronlinalg
rng = np.random.default_rng(0)
for dt in (cp.float32, cp.float64, cp.float16):
    for shapes, m in [([(8, 8)] * 3, 5), ([(3, 5), (7, 2), (4, 4)], 7), ([(16, 16)] * 2, 33),
                      ([(2, 2)] * 10, 4), ([(32, 32)] * 2, 9)]:
        fs = [cp.asarray(rng.standard_normal(s), dtype=dt) for s in shapes]
        k = int(np.prod([s[0] for s in shapes])); l = int(np.prod([s[1] for s in shapes]))
        x = cp.asarray(rng.standard_normal((m, k)), dtype=dt)
        kronlinalg.kron_matmul(x, fs, algorithm="sliced")
        kronlinalg.kron_matmul(cp.asarray(rng.standard_normal((l, m)), dtype=dt), fs,
                               side="left", algorithm="sliced")
# the natural-order float32 kernel (contiguous x @ kron, P x P factors): line and column tiles,
# 1-4 steps, partial tiles, beta
for shapes, m in [([(8, 8)] * 3, 5), ([(8, 8)] * 7, 2), ([(16, 16)] * 3, 3), ([(16, 16)] * 5, 2),
                  ([(16, 16)], 300), ([(32, 32)] * 4, 2), ([(32, 32)] * 3, 3), ([(64, 64)] * 2, 5), ([(64, 64)] * 3, 3)]:
    fs = [cp.asarray(rng.standard_normal(s), dtype=cp.float32) for s in shapes]
    k = int(np.prod([s[0] for s in shapes]))
    x, y = (cp.asarray(rng.standard_normal((m, k)), dtype=cp.float32) for _ in range(2))
    kronlinalg.kron_matmul(x, fs, algorithm="sliced", beta=0.5, y=y)
# blocks that take several tiles each, loads of the next ones in flight (2-line tiles)
import os
os.environ["KRONLINALG_KRON_NATURAL_T"] = "2"
fs = [cp.asarray(rng.standard_normal((32, 32)), dtype=cp.float32) for _ in range(2)]
kronlinalg.kron_matmul(cp.asarray(rng.standard_normal((1001, 1024)), dtype=cp.float32), fs,
                       algorithm="sliced")
del os.environ["KRONLINALG_KRON_NATURAL_T"]
# the one-pass cluster kernel (six 8 x 8 factors, 16-block clusters, distributed shared memory):
# one row, and more rows than clusters
os.environ["KRONLINALG_KRON_CLUSTER"] = "1"
fs = [cp.asarray(rng.standard_normal((8, 8)), dtype=cp.float32) for _ in range(6)]
for m in (1, 19):
    kronlinalg.kron_matmul(cp.asarray(rng.standard_normal((m, 8 ** 6)), dtype=cp.float32), fs,
                           algorithm="sliced")
del os.environ["KRONLINALG_KRON_CLUSTER"]
from kronlinalg.structured import KSChain
for dt in (cp.float32, cp.float16):
    for pats in [[(1, 4, 4, 3)], [(2, 3, 5, 4)], [(3, 8, 4, 1), (1, 6, 9, 2)], [(4, 16, 16, 1)],
                 [(2, 8, 4, 6)], [(1, 16, 16, 12)], [(1, 8, 8, 48)], [(1, 48, 40, 1)],
                 [(2, 24, 16, 8)], [(1, 16, 24, 6)], [(3, 40, 16, 3)], [(1, 130, 24, 1)],
                 [(1, 256, 136, 1)], [(1, 72, 200, 2)], [(1, 136, 104, 4)], [(1, 40, 48, 6)]]:
        ch = KSChain.random(pats, rng=rng, xp=cp, dtype=dt)
        rows, cols = ch.shape
        kronlinalg.structured_matmul(cp.asarray(rng.standard_normal((37, cols)), dtype=dt), ch,
                                     algorithm="kernel")
        for nb in (29, 40):  # 40: rows 16-byte aligned (the pipelined half kernel)
            kronlinalg.structured_matmul(cp.asarray(rng.standard_normal((cols, nb)), dtype=dt),
                                         ch, layout="batch_last", algorithm="kernel")
# the strided algorithm (K transposed by transpose_values, then cuBLAS; batch_first with d > 1
# through the planar copies: vector paths, d = 5 and odd runs one element per thread)
for dt in (cp.float32, cp.float16, cp.float64):
    for pats in [[(2, 3, 5, 4)], [(3, 8, 4, 1), (1, 6, 9, 2)], [(5, 7, 3, 2)], [(1, 16, 8, 3)],
                 [(2, 8, 16, 8)], [(1, 24, 16, 12)], [(1, 8, 8, 48)], [(1, 5, 7, 5)]]:
        ch = KSChain.random(pats, rng=rng, xp=cp, dtype=dt)
        x = cp.asarray(rng.standard_normal((ch.shape[1], 33)), dtype=dt)
        kronlinalg.structured_matmul(x, ch, layout="batch_last", algorithm="strided")
        kronlinalg.structured_matmul(cp.ascontiguousarray(x.T), ch, algorithm="strided")
        # block_dense: the diagonal blocks formed dense (dense_slabs), one GEMM in place
        kronlinalg.structured_matmul(x, ch, layout="batch_last", algorithm="block_dense")
        kronlinalg.structured_matmul(cp.ascontiguousarray(x.T), ch, algorithm="block_dense")
# the half types' wide tiles (launch_pipe_wide): batches that give every SM two tiles
for pats, nb in [([(1, 16, 16, 8)], 16929), ([(1, 128, 128, 8)], 8500), ([(1, 256, 128, 6)], 4300),
                 ([(1, 256, 128, 3)], 8500), ([(1, 256, 128, 2)], 16900),
                 ([(1, 128, 128, 12)], 5700)]:
    ch = KSChain.random(pats, rng=rng, xp=cp, dtype=cp.float16)
    x = cp.asarray(rng.standard_normal((nb, ch.shape[1])), dtype=cp.float16)
    kronlinalg.structured_matmul(x, ch, algorithm="kernel")
    kronlinalg.structured_matmul(cp.ascontiguousarray(x.T), ch, layout="batch_last",
                                 algorithm="kernel")
# the natural-layout kernel forced on beyond the sizes it is taken for (KRONLINALG_KS_NATURAL is
# read per call): d = 2, 3, tails in batch, b and c, a > 1, a chain
import os
os.environ["KRONLINALG_KS_NATURAL"] = "1"
for pats, nb in [([(1, 72, 200, 2)], 257), ([(3, 130, 24, 2)], 65), ([(1, 136, 40, 3)], 129),
                 ([(2, 24, 8, 3)], 70), ([(1, 200, 264, 3)], 300), ([(1, 9, 8, 2)], 1),
                 ([(1, 64, 48, 3), (2, 36, 24, 2)], 45)]:
    ch = KSChain.random(pats, rng=rng, xp=cp, dtype=cp.float16)
    x = cp.asarray(rng.standard_normal((nb, ch.shape[1])), dtype=cp.float16)
    kronlinalg.structured_matmul(x, ch, algorithm="kernel")
del os.environ["KRONLINALG_KS_NATURAL"]
# K pre-transposed for the half types' runs of 4 j (d = 12) and of 8 j, both layouts
os.environ["KRONLINALG_KS_KT"] = "1"
for pats, nb in [([(1, 24, 40, 12)], 90), ([(2, 40, 24, 12)], 33), ([(1, 16, 24, 8)], 70)]:
    ch = KSChain.random(pats, rng=rng, xp=cp, dtype=cp.float16)
    x = cp.asarray(rng.standard_normal((nb, ch.shape[1])), dtype=cp.float16)
    kronlinalg.structured_matmul(x, ch, algorithm="kernel")
    kronlinalg.structured_matmul(cp.ascontiguousarray(x.T), ch, layout="batch_last",
                                 algorithm="kernel")
del os.environ["KRONLINALG_KS_KT"]
cp.cuda.Device().synchronize(); print("sanitizer script done")
PY
  for tool in memcheck racecheck; do
    echo "== $tool" | tee -a "$OUT/sanitizer.txt"
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 python /tmp/san.py 2>&1 \
      | tail -6 | tee -a "$OUT/sanitizer.txt"
    # the natural-order kron kernel's line and column tiles and its ring form, then with the
    # opt-in 4-i column tiles (no ring)
    for ti in 8 4; do
      KRONLINALG_KRON_NATURAL_TI_MIN=$ti timeout 120 compute-sanitizer --tool $tool \
        --error-exitcode 9 python benchmarks/kron_natural_sanitize.py 2>&1 | tail -2 \
        | tee -a "$OUT/sanitizer.txt"
    done
  done
}

step_calibrate() {
  timeout 120 python -c "import json, kronlinalg; print(json.dumps(kronlinalg.calibrate(force=True).to_dict(), indent=1))" \
    2>&1 | tee "$OUT/calibrate.txt" | tail -60
}

step_demo() {
  timeout 120 kronlinalg demo 2>&1 | tee "$OUT/demo_gpu.txt"
}

step_kron() {
  timeout 300 python benchmarks/kron_gpu_compare.py --cases $D/cases.json \
    --anchors $D/h100-anchors-2026-11-22.json --json "$OUT/kron_gpu.json" 2>&1 \
    | tee "$OUT/kron_gpu.txt" | tail -12
}

step_overhead() {
  timeout 120 python benchmarks/host_overhead.py 2>&1 | tee "$OUT/host_overhead.txt" | head -12
}

step_planner() {
  timeout 420 python benchmarks/planner_quality.py --device gpu --tune --budget 0.1 \
    --json "$OUT/planner_quality_gpu.json" 2>&1 | tee "$OUT/planner_quality_gpu.txt" | tail -30
}

# ~370 s on an H100 since the GEMM tuning searches (912 GEMM signatures at up to 0.15 s each):
# give it a device call of its own
step_structured() {
  timeout 560 python benchmarks/structured_compare.py --device gpu --no-tune \
    --json "$OUT/structured_gpu.json" 2>&1 | tee "$OUT/structured_gpu.txt" | tail -30
}

# the one-pass cluster kernel alone: its tests and 1024 x 8^6 float32 with the kernel off and on
# (KRONLINALG_KRON_CLUSTER; the sanitizer step runs it too), then, with CLUSTER_NCU=1, Nsight
# Compute's per-instruction counters of it (CSV, for reading offline)
step_cluster() {
  timeout 150 python -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_kron_cuda.py \
    -k cluster 2>&1 | tee "$OUT/cluster_tests.txt" | tail -8
  for v in 0 1; do
    KRONLINALG_KRON_CLUSTER=$v timeout 120 python benchmarks/kron_gpu_compare.py \
      --cases $D/cases.json --anchors $D/h100-anchors-2026-11-22.json --sets kron_large \
      --dtypes float32 --only 1024x8^6 2>&1 | tee -a "$OUT/cluster_time.txt" | tail -3
  done
  for v in ${CLUSTER_NCU:-}; do
    KRONLINALG_KRON_CLUSTER=$v timeout 200 ncu --kernel-name regex:cluster --launch-count 1 \
      --set full --import-source no -o "$OUT/ncu_v$v" python benchmarks/kron_gpu_compare.py \
      --cases $D/cases.json --sets kron_large --dtypes float32 --only 1024x8^6 --once \
      > /dev/null 2>&1
    ncu -i "$OUT/ncu_v$v.ncu-rep" --page source --csv --print-source sass \
      > "$OUT/ncu_v${v}_sass.csv" 2>&1
    ncu -i "$OUT/ncu_v$v.ncu-rep" --page details > "$OUT/ncu_v${v}.txt" 2>&1
    rm -f "$OUT/ncu_v$v.ncu-rep"
  done
}

for s in $steps; do
  echo "=== step $s ($(date +%T))"
  "step_$s"
done
echo "=== done ($(date +%T))"
