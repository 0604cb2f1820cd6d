#!/bin/bash
# One device call for issue 37's half-storage criterion (float16 CP-ALS >= 1.7x our float32):
# the half kernel's GPU tests, the benchmark's MTTKRP rows, CP rows at 640^3 rank 64 with the
# old and the new half paths side by side (and the prefactored updates, on float32 too), the
# per-kernel profile of the sweeps, the other GPU tensor tests, compute-sanitizer memcheck and
# racecheck of the MTTKRP kernels (the half variant new) and the factor update (its two-launch
# form new).  Each step under its own limit.  From the repository root after the build:
#   bash .wheelhouse/gpu-run.sh bash benchmarks/tensor_half_session.sh
# TENSOR_CP_MODES: the parafac variants (benchmarks/tensor_gpu.py --cp-modes).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export KRONLINALG_CACHE_DIR=$(mktemp -d)
python3 -c "import tensorly, torch; print('tensorly', tensorly.__version__, 'torch', torch.__version__)"
echo "== half kernel, solve and fused tests ($SECONDS s)"
timeout ${TENSOR_TEST_S:-110} python3 -m pytest -q -m gpu -p no:cacheprovider -rf --maxfail=12 \
  tests/test_tensor_half.py tests/test_tensor_solve.py tests/test_tensor_fused.py 2>&1 \
  | tee "$OUT/tensor_tests.txt" | tail -8
echo "== benchmark ($SECONDS s)"
modes=${TENSOR_CP_MODES:-tf32,tf32-pf,tf32-pf-fk,ieee,float16-old,float16-hv2-hy-pf,float16-hv2-hy-pf-fk,float16-hv2-hy-pf-sk,float16-hv2-hy-pf-sk-fk,bfloat16-old,bfloat16-hv2-hy-pf,bfloat16-hv2-hy-pf-sk-fk}
timeout ${TENSOR_BENCH_S:-125} python3 benchmarks/tensor_gpu.py --budget ${TENSOR_BUDGET:-100} \
  --sections "${TENSOR_SECTIONS:-mttkrp,cp640,half}" --cp-modes "$modes" \
  --out "$OUT/tensor_gpu.json" > "$OUT/tensor_bench.txt" 2>&1
python3 - "$OUT" <<'PY'
import json, re, statistics, sys
out = sys.argv[1]
try:
    rows = json.load(open(out + "/tensor_gpu.json"))["rows"]
except Exception as e:  # noqa: BLE001
    rows = []
    print("no JSON:", e)
for r in rows:
    keep = {k: r[k] for k in ("gpu_ms", "tb_s", "fit9", "rel_err", "nan", "error") if k in r}
    print(f"{r['section'][:10]:10} {r['impl'][:44]:44} {r['ms']:8}", keep)
try:
    text = open(out + "/tensor_gpu_half_profile.txt").read()
except OSError:
    text = ""
for block in text.split("\n\n"):
    spans = [float(m) for m in re.findall(r"replay: \d+ kernels, span ([\d.]+) us", block)]
    if spans:
        print(block.splitlines()[0][:110], f"| median span {statistics.median(spans):.1f} us")
PY
echo "== compute-sanitizer ($SECONDS s)"
{
  echo "-- memcheck, every kernel of the script"
  timeout ${TENSOR_MEMCHECK_S:-60} compute-sanitizer --tool memcheck \
    python3 benchmarks/tensor_sanitize.py 2>&1 | tail -3
  for kernel in mttkrp spd_solve fit_terms; do
    echo "-- racecheck $kernel"
    timeout ${TENSOR_SAN_S:-35} compute-sanitizer --tool racecheck --kernel-name kns=$kernel \
      python3 benchmarks/tensor_sanitize.py 2>&1 | tail -3
  done
} 2>&1 | tee -a "$OUT/tensor_tests.txt"
echo "== other GPU tensor tests ($SECONDS s)"
timeout ${TENSOR_TEST3_S:-40} python3 -m pytest -q -m gpu -p no:cacheprovider -rf \
  tests/test_tensor.py 2>&1 | tee -a "$OUT/tensor_tests.txt" | tail -4
echo "== done ($SECONDS s)"
