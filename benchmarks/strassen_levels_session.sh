#!/bin/bash
# One device call for strassen_cublas's one- and two-level Winograd forms (float64, float32):
#   bash .wheelhouse/gpu-run.sh bash benchmarks/strassen_levels_session.sh
# The GPU tests of strassen_matmul (and of ST_TESTS, other files) beside compute-sanitizer
# memcheck of strassen_cublas (both one-level forms, two levels in Winograd's form and with the
# private copy, odd and unaligned shapes); then, alone on the GPU: levels 1, 2 and auto against
# torch.matmul and cupy.matmul in interleaved rounds, float64 at ST_SIZES (single synchronised
# calls; ST_QUEUED sizes also 3 calls back to back a round) and float32 at ST_F32_SIZES, and
# (ST_STAGES=1) the per-launch table of two levels at N = 16384, measured beside predicted.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ "${ST_SAN:-1}" = 1 ]; then
  ( sleep 5; timeout ${ST_SAN_S:-150} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python benchmarks/strassen_sanitize.py --cublas > "$OUT/strassen_memcheck.txt" 2>&1
    echo "memcheck (--cublas) rc $?" >> "$OUT/strassen_memcheck.txt" ) &
  san=$!
fi
timeout ${ST_TEST_S:-170} python -m pytest -q -m gpu -p no:cacheprovider -rf \
  tests/test_strassen.py tests/test_strassen_gpu.py $ST_TESTS > "$OUT/strassen_tests.txt" 2>&1
echo "tests rc $? ($SECONDS s)"; tail -6 "$OUT/strassen_tests.txt"
[ -n "$san" ] && { wait $san; tail -3 "$OUT/strassen_memcheck.txt"; }
echo "($SECONDS s)"
ab() { timeout ${ST_AB_S:-150} python benchmarks/strassen_torch_8192.py --cupy "$@" 2>&1 \
  | tee -a "$OUT/strassen_levels.txt" | grep -v "max rel. diff"; }
ab --sizes ${ST_SIZES:-16384,12288,8192} --rounds ${ST_ROUNDS:-5} --levels 1,2,auto
[ -n "$ST_QUEUED" ] && ab --sizes $ST_QUEUED --rounds ${ST_ROUNDS:-5} --levels 1,auto --queued 3
[ -n "${ST_F32_SIZES-16384,8192}" ] && ab --dtype float32 --sizes ${ST_F32_SIZES-16384,8192} \
  --rounds ${ST_F32_ROUNDS:-3} --levels 1,2,auto
grep "max rel. diff" "$OUT/strassen_levels.txt" | sort -t' ' -k9 | tail -3
echo "($SECONDS s)"
[ "${ST_STAGES:-1}" = 1 ] && timeout ${ST_STAGE_S:-60} python - <<'PY' 2>&1 | tee "$OUT/strassen_stages.txt"
import cupy as cp
import kronlinalg
from kronlinalg import strassen
n = 16384
a, b = (cp.random.default_rng(s).standard_normal((n, n)) for s in (1, 2))
print("auto picks:", kronlinalg.plan("strassen_matmul", (n, n), (n, n), dtype="float64",
      device=a)[0])
rows = strassen.stage_times(a, b, levels=2, algorithm="strassen_cublas", repeats=2)
tm = tp = 0.0
print("| stage | launches | measured ms | predicted ms | pred / meas |")
for lab, meas, pred, cnt in rows:
    tm += meas; tp += pred
    print(f"| {lab} | {cnt} | {meas * 1e3:.3f} | {pred * 1e3:.3f} | {pred / meas:.2f} |")
print(f"| total | | {tm * 1e3:.2f} | {tp * 1e3:.2f} | {tp / tm:.3f} |")
PY
echo "== done ($SECONDS s)"
