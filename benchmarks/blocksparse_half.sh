#!/bin/bash
# One device call for the half-precision SpMM and batched variants (issue 34), each step under
# its own limit so that what finished comes back.  After the build:
#   bash .wheelhouse/gpu-run.sh bash benchmarks/blocksparse_half.sh
# HALF_SECTIONS (default spmm,probe,batched), HALF_ARGS (e.g. --quick); HALF_GPU=1: also the
# FP16 rows of blocksparse_gpu.py; HALF_TESTS=full: every GPU test of the two block-sparse
# files (else the half-precision ones); HALF_SAN=all: memcheck over every kernel.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== benchmark ($SECONDS s)"
timeout ${HALF_BENCH_S:-120} python benchmarks/blocksparse_half.py $HALF_ARGS \
  --sections ${HALF_SECTIONS:-spmm,probe,batched} --out "$OUT/blocksparse_half.json" \
  2>&1 | tee "$OUT/blocksparse_half.txt" | grep -v '^{' | tail -12
python - "$OUT/blocksparse_half.json" <<'PY' 2>&1 | tee "$OUT/blocksparse_half_table.md"
import json, sys
r = json.load(open(sys.argv[1]))
for row in r.get("spmm", []):
    ms = row["ms"]
    print(f"{row['dtype']} d={row['density']} rhs={row['rhs']} nnzb={row['nnzb']} "
          f"L2 MB={row['l2_mb']:.0f} dense={ms['dense']:.4f} bits={all(row['same_bits'].values())}")
    for k, v in ms.items():
        if k != "dense":
            print(f"   {k:14s} {v:.4f} ms  x_dense {row['x_dense'][k]:.2f}  {row['tbs'][k]:.2f} TB/s"
                  f"  {row['tflops'][k]:.0f} TF/s")
for p in r.get("probe", []):
    print("probe", p)
for row in r.get("batched", []):
    ms = row["ms"]
    print(f"batched order={row['order']} rhs={row['rhs']} tile={row['tile']} old={ms['old']:.4f} "
          f"staged={ms['staged']:.4f} bmm={ms['bmm']:.4f} ratio={row['ratio']['staged']:.3f} "
          f"(old {row['ratio']['old']:.3f}) TB/s={row['tbs']['staged']:.2f}/{row['tbs']['bmm']:.2f} "
          f"bytes={row['bytes_ratio']:.3f} floor_hbm={row['achieved_over_floor_hbm']:.2f} "
          f"floor_bmm={row['achieved_over_floor_bmm_rate']:.2f} bits={row['same_bits']}")
PY
if [ -n "$HALF_GPU" ]; then  # the FP16 rows of the issue's table (torch BSR, 2D, Morton)
  echo "== blocksparse_gpu.py, FP16 ($SECONDS s)"
  timeout ${HALF_GPU_S:-60} python benchmarks/blocksparse_gpu.py --budget 45 --sections spmm \
    --spmm-dtypes fp16 --out "$OUT/blocksparse_fp16.json" 2>&1 | grep -E '^\| (dtype|fp16)' | cut -c1-400
fi
echo "== ncu ($SECONDS s)"
if command -v ncu >/dev/null; then
  timeout ${HALF_NCU_S:-60} ncu -k regex:"spmm_(panel|persistent)" -c 3 --metrics \
gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_op_read_hit_rate.pct,\
dram__bytes_read.sum,dram__bytes_write.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,\
sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__throughput.avg.pct_of_peak_sustained_active,\
lts__t_sectors_srcunit_tex_op_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed \
    python benchmarks/blocksparse_half.py --ncu > "$OUT/blocksparse_ncu.txt" 2>&1
  grep -E "variant|spmm_p|duration|sectors|hit_rate|bytes|pct|ERR|rror" "$OUT/blocksparse_ncu.txt" | cut -c1-150 | tail -60
else
  echo "no ncu"
fi
echo "== tests ($SECONDS s)"
sel=(-k "panel_options or every_tile or batched_kernel"); [ "$HALF_TESTS" = full ] && sel=()
timeout ${HALF_TEST_S:-90} python -m pytest -q -m gpu -p no:cacheprovider -rf \
  tests/test_blocksparse_batched.py tests/test_blocksparse.py "${sel[@]}" \
  2>&1 | tee "$OUT/blocksparse_tests.txt" | tail -8
echo "== sanitizer ($SECONDS s)"
{
  if [ "$HALF_SAN" = all ]; then
    timeout ${HALF_SAN_S:-60} compute-sanitizer --tool memcheck --error-exitcode 9 \
      python benchmarks/blocksparse_sanitize.py 2>&1 | tail -4
  fi
  echo "-- memcheck, panel options + batched"
  timeout ${HALF_MEM_S:-45} compute-sanitizer --tool memcheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --panel --batched 2>&1 | tail -4
  echo "-- racecheck, panel options + batched"
  timeout ${HALF_RACE_S:-50} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python benchmarks/blocksparse_sanitize.py --panel --batched 2>&1 | tail -4
} 2>&1 | tee "$OUT/blocksparse_sanitizer.txt"
echo "== done ($SECONDS s)"
