#!/bin/bash
# One device call for kronlinalg.tensor (issue 37): the kernel's GPU tests, the GPU benchmark
# against TensorLy (torch and CuPy backends), the other GPU tests, compute-sanitizer on the
# one-pass MTTKRP kernel, the 2-core CPU comparison; each step under its own limit so that
# what finished comes back.  Run from the repository root after the build:
#   bash .wheelhouse/gpu-run.sh bash benchmarks/tensor_session.sh
# (TensorLy's wheel travels in .wheelhouse; SciPy, which it needs, is on the device.)
# TENSOR_SECTIONS: the benchmark's sections (default all but shard); shard mode runs in a
# process of its own (TENSOR_SHARD=0 skips it); TENSOR_CPU=0 skips the CPU step;
# TENSOR_SHARD_FIRST=1 runs the shard step before the benchmark;
# TENSOR_SAN_KERNELS: the kernels compute-sanitizer checks (default "mttkrp spd_solve").
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -c "import tensorly, torch; print('tensorly', tensorly.__version__, 'torch', torch.__version__)"
echo "== kernel tests ($SECONDS s)"
timeout ${TENSOR_TEST_S:-60} python3 -m pytest -q -m gpu -p no:cacheprovider -rf \
  tests/test_tensor_solve.py tests/test_tensor_fused.py tests/test_tensor_half.py 2>&1 \
  | tee "$OUT/tensor_tests.txt" \
  | tail -8
if [ "${TENSOR_SHARD:-1}" = 1 ] && [ "${TENSOR_SHARD_FIRST:-0}" = 1 ]; then
  echo "== shard mode, a process of its own ($SECONDS s)"
  timeout ${TENSOR_SHARD_S:-90} python3 benchmarks/tensor_gpu.py --sections shard \
    --out "$OUT/tensor_shard.json" 2>&1 | tee "$OUT/tensor_shard.txt" | tail -8
fi
echo "== benchmark ($SECONDS s)"
timeout ${TENSOR_BENCH_S:-140} python3 benchmarks/tensor_gpu.py --budget ${TENSOR_BUDGET:-95} \
  --sections "${TENSOR_SECTIONS:-}" --out "$OUT/tensor_gpu.json" 2>&1 \
  | tee "$OUT/tensor_bench.txt" | grep -v "^ " | tail -70
if [ "${TENSOR_SHARD:-1}" = 1 ] && [ "${TENSOR_SHARD_FIRST:-0}" = 0 ]; then
  echo "== shard mode, a process of its own ($SECONDS s)"
  timeout ${TENSOR_SHARD_S:-90} python3 benchmarks/tensor_gpu.py --sections shard \
    --out "$OUT/tensor_shard.json" 2>&1 | tee -a "$OUT/tensor_bench.txt" | tail -8
fi
echo "== other GPU tests ($SECONDS s)"
timeout ${TENSOR_TEST_S:-60} python3 -m pytest -q -m gpu -p no:cacheprovider -rf \
  tests/test_tensor.py 2>&1 | tee -a "$OUT/tensor_tests.txt" | tail -8
echo "== compute-sanitizer ($SECONDS s)"
for tool in memcheck racecheck; do
  for kernel in ${TENSOR_SAN_KERNELS:-mttkrp spd_solve}; do
    echo "-- $tool $kernel"
    timeout ${TENSOR_SAN_S:-50} compute-sanitizer --tool $tool --kernel-name kns=$kernel \
      python3 benchmarks/tensor_sanitize.py 2>&1 | tail -3
  done
done 2>&1 | tee -a "$OUT/tensor_tests.txt"  # (at most 8 files come back from $OUT)
if [ "${TENSOR_CPU:-1}" = 1 ]; then
  echo "== cpu, 2 cores ($SECONDS s)"
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2 timeout ${TENSOR_CPU_S:-30} \
    taskset -c 0,1 python3 benchmarks/tensor_gpu.py --cpu --out "$OUT/tensor_cpu.json" 2>&1 | tail -6
fi
echo "== done ($SECONDS s)"
