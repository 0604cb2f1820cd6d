#!/bin/bash
# One device call for strassen_matmul (after the build: bash .wheelhouse/gpu-run.sh bash
# benchmarks/strassen_session.sh): the FP64 leaf microbenchmark (DMMA shapes, leaf variants and
# sum leaves against cuBLAS), the GPU tests, compute-sanitizer memcheck + racecheck, and the
# benchmark; each under its own limit so that what finished comes back.
#   OUT=/tmp/out bash benchmarks/strassen_session.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== microbenchmark build, in the background ($SECONDS s)"
nvcc -arch=sm_90a -std=c++17 -O3 -I kernels/include -I kernels/common -I kernels/strassen \
  benchmarks/strassen_leaf_bench.cu -ldl -o /tmp/strassen_leaf_bench > "$OUT/strassen_leaf.txt" 2>&1 &
nvcc_pid=$!
echo "== tests ($SECONDS s)"
timeout ${ST_TEST_S:-150} python -m pytest -q -m gpu -p no:cacheprovider -rf -x \
  tests/test_strassen.py tests/test_strassen_gpu.py 2>&1 | tee "$OUT/strassen_tests.txt" | tail -15
echo "== microbenchmark ($SECONDS s)"
wait $nvcc_pid
CUBLAS_LIB=$(python -c "
import cupy as cp
a = cp.ones((64, 64)); float((a @ a).sum())
print(next(l.split()[-1] for l in open('/proc/self/maps') if 'libcublas.so' in l and 'Lt' not in l))")
echo "cuBLAS: $CUBLAS_LIB"
CUBLAS_LIB=$CUBLAS_LIB timeout ${ST_MICRO_S:-60} /tmp/strassen_leaf_bench 2>&1 | tee -a "$OUT/strassen_leaf.txt"
if [ -n "$ST_NCU" ]; then  # (ST_NCU=1: the stall reasons of the plain leaf)
echo "== ncu: the plain leaf at N = 4096 ($SECONDS s)"
timeout ${ST_NCU_S:-90} ncu --kernel-name regex:leaf_f64_mma --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_pipe_lsu.sum,sm__inst_executed_pipe_fp64.sum \
  /tmp/strassen_leaf_bench profile > "$OUT/strassen_ncu.txt" 2>&1
echo "ncu rc $?"; grep -E "stalled|Throughput|Busy|Pipe|bank|Issued|Eligible|Active Warps|Cycles Per|L2|DRAM|Shared|pipe|Hit" "$OUT/strassen_ncu.txt" | grep -v "^==PROF==" | awk '$NF != "0" && $NF != "0.00"' | head -70
fi
echo "== sanitizer ($SECONDS s)"
timeout ${ST_SAN_S:-100} compute-sanitizer --tool memcheck --error-exitcode 9 \
  python benchmarks/strassen_sanitize.py > "$OUT/strassen_sanitizer.txt" 2>&1
echo "memcheck rc $?" | tee -a "$OUT/strassen_sanitizer.txt"; tail -4 "$OUT/strassen_sanitizer.txt"
timeout ${ST_RACE_S:-60} compute-sanitizer --tool racecheck --error-exitcode 9 \
  python benchmarks/strassen_sanitize.py --quick > "$OUT/strassen_racecheck.txt" 2>&1
echo "racecheck rc $?" | tee -a "$OUT/strassen_racecheck.txt"; tail -4 "$OUT/strassen_racecheck.txt"
echo "== benchmark ($SECONDS s)"
timeout ${ST_BENCH_S:-200} python benchmarks/strassen_gpu.py --budget ${ST_BUDGET:-180} \
  --out "$OUT/strassen.json" 2>&1 | tee "$OUT/strassen_bench.txt" | tail -80
echo "== done ($SECONDS s)"
