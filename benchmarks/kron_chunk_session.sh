#!/bin/bash
# One device call for kron_matmul's row chunks (KRONLINALG_KRON_CHUNK, kernels/kron/kron_cuda.cu):
#   bash .wheelhouse/gpu-run.sh bash benchmarks/kron_chunk_session.sh
# The GPU tests of the natural-order plans and the chunks, compute-sanitizer memcheck of a
# chunked float64 product (chunks of one row), then kron_large float64 without and with chunks
# (and other L2 budgets), float32 without and with (KRONLINALG_KRON_CHUNK=2), our kernels only
# (the shuffle reference left out: its ratio is in docs/performance.md), roofline fractions.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout ${KC_TEST_S:-150} python -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_kron_cuda.py \
  -k "chunk or natural" > "$OUT/kron_chunk_tests.txt" 2>&1
echo "tests rc $? ($SECONDS s)"; tail -5 "$OUT/kron_chunk_tests.txt"
cat > /tmp/kc_san.py <<'PY'
import cupy as cp, numpy as np, kronlinalg
rng = np.random.default_rng(0)
fs = [cp.asarray(rng.standard_normal((8, 8))) for _ in range(6)]
x = cp.asarray(rng.standard_normal((6, 8 ** 6)))
out = kronlinalg.kron_matmul(x, fs, algorithm="sliced")
ref = kronlinalg.kron_matmul(cp.asnumpy(x), [cp.asnumpy(f) for f in fs])
print("max rel err", float(np.abs(cp.asnumpy(out) - ref).max() / np.abs(ref).max()))
PY
KRONLINALG_KRON_CHUNK_KB=2048 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python /tmp/kc_san.py 2>&1 | tail -4; echo "memcheck rc ${PIPESTATUS[0]} ($SECONDS s)"
run() {  # label, env..., then the compare script's output (rows and medians) to $OUT/kron_chunk_bench.txt
  label=$1; shift
  echo "== $label" | tee -a "$OUT/kron_chunk_bench.txt"
  env "$@" timeout 120 python benchmarks/kron_gpu_compare.py --cases benchmarks/data/cases.json \
    --anchors benchmarks/data/h100-anchors-2026-11-22.json --sets kron_large --no-shuffle \
    --no-ieee --reps ${KC_REPS:-5} --dtypes $DT ${ONLY:+--only $ONLY} 2>&1 \
    | tee -a "$OUT/kron_chunk_bench.txt" | grep -vE "^(float32 mode|case )" | cut -c1-120
}
DT=float64 run "float64, no chunks" KRONLINALG_KRON_CHUNK=0
DT=float64 run "float64, chunks (16 MiB)" KRONLINALG_KRON_CHUNK=1
DT=float64 run "float64, chunks (8 MiB)" KRONLINALG_KRON_CHUNK=1 KRONLINALG_KRON_CHUNK_KB=8192
DT=float64 run "float64, chunks (32 MiB)" KRONLINALG_KRON_CHUNK=1 KRONLINALG_KRON_CHUNK_KB=32768
DT=float32 run "float32, no chunks" KRONLINALG_KRON_CHUNK=0
DT=float32 run "float32, chunks (16 MiB)" KRONLINALG_KRON_CHUNK=2
echo "== done ($SECONDS s)"
