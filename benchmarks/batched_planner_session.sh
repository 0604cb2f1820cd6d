#!/bin/bash
# One device call: the GPU tests of batched_matmul and the compiled fronts, the probe's host
# times, and the planner's held-out GPU grid (benchmarks/batched_planner_gpu.py).
#   OUT=/tmp/out bash .wheelhouse/gpu-run.sh bash benchmarks/batched_planner_session.sh
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 90 python -m pytest -q -m gpu -p no:cacheprovider -x tests/test_batched.py tests/test_signatures.py 2>&1 | tail -6 | tee $OUT/tests.txt
timeout 60 python benchmarks/batched_probe.py --sizes 10000:16,1000:16,1000:32,1000:64 --dtypes float64,float16 --out $OUT/probe.json 2>&1 | tee $OUT/probe.txt
timeout ${BPL_S:-200} python benchmarks/batched_planner_gpu.py $BPL_ARGS --out $OUT/planner_gpu.json 2>&1 | tee $OUT/planner_gpu.txt | tail -45
echo done
