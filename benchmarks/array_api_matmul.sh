#!/bin/bash
# The array API conformance tests of matmul (array-api-tests' test_linalg.py: test_matmul and
# test_linalg_matmul) against kronlinalg.namespace(x) for NumPy, array-api-strict and torch
# (and CuPy / CUDA torch where a GPU is visible): its matmul and linalg.matmul are
# kronlinalg.matmul, every other name the library's own.
#   bash benchmarks/array_api_matmul.sh PATH_TO_ARRAY_API_TESTS [max-examples]
# PATH_TO_ARRAY_API_TESTS: a checkout of github.com/data-apis/array-api-tests with its array-api
# submodule (`git clone --recursive`); needs hypothesis >= 6.151, ndindex, pytest-json-report.
# torch skips uint16/32/64, as array-api-compat's own CI does: torch's matmul has none.
# AAM_BACKENDS: the backends to run (default: all of numpy array-api-strict torch cupy torch-cuda
# that are present), e.g. AAM_BACKENDS="cupy torch-cuda" on a GPU machine.
# AAM_ARGS: more pytest arguments, e.g. "--disable-deadline" (the suite's own option): CuPy
# compiles its integer matmul kernels on first use (3.5-3.7 s on the H100 host, 2026-11-27),
# which hypothesis's 800 ms deadline reports as a flaky failure, the result itself right.
set -o pipefail
AAT=${1:?path to an array-api-tests checkout}
N=${2:-2000}
cd "$AAT" || exit 1
status=0
BACKENDS=" ${AAM_BACKENDS:-numpy array-api-strict torch cupy torch-cuda} "
run() {  # name, setup statement defining a, extra env
  [[ "$BACKENDS" == *" $1 "* ]] || return 0
  echo "== $1"
  env ARRAY_API_TESTS_MODULE="exec('import kronlinalg; $2; xp = kronlinalg.namespace(a)')" $3 \
    python -m pytest -q -p no:cacheprovider -rf array_api_tests/test_linalg.py -k matmul \
    --max-examples="$N" $AAM_ARGS > /tmp/aam_$1.txt 2>&1 || status=1
  # the verdict, and for a failure the falsifying example and the assertion (one run in a
  # GPU call can not be repeated to look)
  grep -E "^(FAILED|E  |Falsifying)|^ +(x1|x2)=|passed|failed" /tmp/aam_$1.txt | head -40
}
run numpy "import numpy as m; a = m.empty(0)"
run array-api-strict "import array_api_strict as m; a = m.empty(0)"
run torch "import torch as m; a = m.empty(0)" "ARRAY_API_TESTS_SKIP_DTYPES=uint16,uint32,uint64"
if python -c "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0" 2>/dev/null; then
  run cupy "import cupy as m; a = m.empty(0)"
fi
if python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  run torch-cuda "import torch as m; a = m.empty(0, device=\"cuda\")" \
    "ARRAY_API_TESTS_SKIP_DTYPES=uint16,uint32,uint64"
fi
exit $status
