#!/bin/bash
# One device call for issue 37's half-storage criterion (CP-ALS in float16 / bfloat16 storage
# >= 1.7x our float32 per iteration): GPU tests of the tensor files (the new paths are the
# defaults while they run), the benchmark's CP rows at 640^3 rank 64 with the old and the new
# switches side by side (tags, benchmarks/tensor_gpu.py --cp-modes), the MTTKRP rows, the
# per-kernel profile of the sweeps, compute-sanitizer memcheck and racecheck of the changed
# kernels (the factor update's inverse phases, the half MTTKRP's Gram scale; memcheck also
# the Gram-scaled copy).  Each step under its own limit,
# the most wanted first.  From the repository root after the build:
#   bash .wheelhouse/gpu-run.sh bash benchmarks/tensor_half_session.sh
# TENSOR_CP_MODES: the parafac variants; TENSOR_PROFILE_MODES: the sweeps profiled.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export KRONLINALG_CACHE_DIR=$(mktemp -d)
python3 -c "import tensorly, torch; print('tensorly', tensorly.__version__, 'torch', torch.__version__)"
echo "== half and solve tests ($SECONDS s)"
timeout ${TENSOR_TEST_S:-90} python3 -m pytest -q -m gpu -p no:cacheprovider -rf --maxfail=12 \
  tests/test_tensor_half.py tests/test_tensor_solve.py 2>&1 | tee "$OUT/tensor_tests.txt" | tail -6
echo "== benchmark ($SECONDS s)"
# baselines first, then the switches alone (the Python-only ones before the new kernels'),
# then the combinations, then the baselines and the combinations again (order effects): a
# crash keeps the rows before it
old32=tf32-pf-fk; new32=$old32-sg-sc-iv-fg; mid32=$old32-sg-sc-fg
old16=float16-hv2-hy-pf-fk; new16=$old16-gs-gl-sg-sc-iv-fs-fg; mid16=$old16-gs-gl-sg-sc-fs-fg
oldbf=bfloat16-hv2-hy-pf-fk; newbf=$oldbf-bc-sg-sc-iv-fs-fg; midbf=$oldbf-bc-sg-sc-fs-fg
modes=${TENSOR_CP_MODES:-$old32,$old16,$oldbf,bfloat16-hv2-hy-pf-sk-fk,ieee,$old32-sg,$old32-sc,$old16-sg-sc,$oldbf-bc,$old16-gs,$old16-gs-gl,$old16-fs,$old32-fg,$old32-iv,$mid32,$mid16,$midbf,$new32,$new16,$newbf,$old32-r2,$old16-r2,$oldbf-r2,$mid32-r2,$mid16-r2,$midbf-r2,$new32-r2,$new16-r2,$newbf-r2}
profiles=${TENSOR_PROFILE_MODES:-$old16,$new16,$newbf,$old32,$new32}
timeout ${TENSOR_BENCH_S:-95} python3 benchmarks/tensor_gpu.py --budget 80 --sections cp640 \
  --cp-modes "$modes" --out "$OUT/tensor_gpu.json" > "$OUT/tensor_bench.txt" 2>&1
timeout ${TENSOR_BENCH2_S:-45} python3 benchmarks/tensor_gpu.py --budget 35 \
  --sections "${TENSOR_SECTIONS:-mttkrp,half}" --profile-modes "$profiles" \
  --out "$OUT/tensor_gpu_mh.json" >> "$OUT/tensor_bench.txt" 2>&1
python3 - "$OUT" <<'PY'
import json, re, statistics, sys
out = sys.argv[1]
for name in ("tensor_gpu", "tensor_gpu_mh"):
    try:
        rows = json.load(open(f"{out}/{name}.json"))["rows"]
    except Exception as e:  # noqa: BLE001
        rows = []
        print("no JSON:", name, e)
    for r in rows:
        keep = {k: r[k] for k in ("gpu_ms", "tb_s", "fit9", "rel_err", "nan", "error") if k in r}
        if "graph" not in str(r.get("run", "graph")):
            keep["run"] = r["run"]
        print(f"{r['section'][:10]:10} {r['impl'][:58]:58} {r['ms']:8}", keep)
try:
    text = open(out + "/tensor_gpu_mh_half_profile.txt").read()
except OSError:
    text = ""
for block in text.split("\n\n"):
    spans = [float(m) for m in re.findall(r"replay: \d+ kernels, span ([\d.]+) us", block)]
    if spans:
        print(block.splitlines()[0][:120], f"| median span {statistics.median(spans):.1f} us")
PY
echo "== compute-sanitizer ($SECONDS s)"
{
  echo "-- memcheck, every kernel of the script"
  timeout ${TENSOR_MEMCHECK_S:-70} compute-sanitizer --tool memcheck \
    python3 benchmarks/tensor_sanitize.py 2>&1 | tail -4
  for kernel in spd_solve mttkrp_half; do
    echo "-- racecheck $kernel"
    timeout ${TENSOR_SAN_S:-25} compute-sanitizer --tool racecheck --kernel-name kns=$kernel \
      python3 benchmarks/tensor_sanitize.py 2>&1 | tail -3
  done
} 2>&1 | tee "$OUT/tensor_sanitizer.txt"
echo "== fused and other GPU tensor tests ($SECONDS s)"
timeout ${TENSOR_TEST3_S:-60} python3 -m pytest -q -m gpu -p no:cacheprovider -rf --maxfail=12 \
  tests/test_tensor_fused.py tests/test_tensor.py 2>&1 \
  | tee "$OUT/tensor_tests_other.txt" | tail -5
echo "== done ($SECONDS s)"
