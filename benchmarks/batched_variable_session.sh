#!/bin/bash
# One device call for batched_matmul's variable sizes on an sm_90a build:
#   OUT=/tmp/out KL_GPU_ARCH=90a bash .wheelhouse/gpu-run.sh bash benchmarks/batched_variable_session.sh
# test_batched's GPU tests (and its variable-size ones with every product on the wgmma kernel:
# KRONLINALG_BATCHED_WGMMA=2, KRONLINALG_BATCHED_LARGE=1; and on the staged form:
# KRONLINALG_BATCHED_WG_STAGED=1), a variable call's device and host time
# kernel by kernel (batched_variable_profile.py), the wgmma A/B (uniform stacks, variable sizes),
# compute-sanitizer memcheck and racecheck (every product of order >= 96 on the wgmma kernel, from
# order 1, and the staged form for rows at other offsets).
set +e
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ timeout 150 python -m pytest -q -m gpu -p no:cacheprovider tests/test_batched.py 2>&1 | tail -5
  KRONLINALG_BATCHED_WGMMA=2 KRONLINALG_BATCHED_LARGE=1 timeout 100 python -m pytest -q -m gpu \
    -p no:cacheprovider tests/test_batched.py -k "variable" 2>&1 | tail -3
  KRONLINALG_BATCHED_WG_STAGED=1 timeout 100 python -m pytest -q -m gpu \
    -p no:cacheprovider tests/test_batched.py -k "variable" 2>&1 | tail -3; } | tee $OUT/tests.txt
timeout ${VS_PROFILE_S:-150} python benchmarks/batched_variable_profile.py --levels ${VS_LEVELS:-0,1,2} --steps 8,1 --host-profile \
  --extra ${VS_EXTRA:-KRONLINALG_BATCHED_LARGE=1} 2>&1 | grep -v Warn | tee $OUT/var_profile.txt
timeout ${VS_AB_S:-150} python benchmarks/batched_wgmma_ab.py --only ${VS_AB:-uniform,variable} \
  --out $OUT/wgmma_ab.json 2>&1 | tee $OUT/wgmma_ab.txt
SAN=("memcheck 96 2 0" "memcheck 1 2 0" "racecheck 1 2 0" "memcheck 96 1 1" "racecheck 96 1 1")
{ for run in "${SAN[@]}"; do
    set -- $run  # tool, KRONLINALG_BATCHED_LARGE, KRONLINALG_BATCHED_WGMMA, KRONLINALG_BATCHED_WG_STAGED
    KRONLINALG_BATCHED_WGMMA=$3 KRONLINALG_BATCHED_LARGE=$2 KRONLINALG_BATCHED_WG_STAGED=$4 \
      timeout 100 compute-sanitizer --tool $1 --error-exitcode 9 \
      python benchmarks/batched_sanitize.py --quick --large-only 2>&1 | tail -3
    echo "$1 (LARGE=$2 WGMMA=$3 WG_STAGED=$4) rc=${PIPESTATUS[0]}"
  done; } 2>&1 | tee $OUT/checks.txt

# optional: Nsight Compute on the wgmma kernel (VS_NCU="variable8:float16 u256:float16")
if [ -n "$VS_NCU" ]; then
  KRONLINALG_BATCHED_WGMMA=2 NCU_KERNEL=wg_kernel NCU_CASES="$VS_NCU" NCU_S=120 bash benchmarks/batched_ncu.sh
fi
echo done
