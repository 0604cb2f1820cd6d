#!/bin/bash
# The natural-order kron kernels of float64 (DMMA) and the half types on the GPU machine, after
# gpu-run.sh has built the checkout: the kron_large table in four dtypes (kron_gpu_compare.py),
# their GPU tests and compute-sanitizer (memcheck, racecheck) on small shapes; logs and JSON to
# $OUT.  Each step gets what is left of a ~400 s call (the parent's elapsed time counts).
#   bash .wheelhouse/gpu-run.sh bash benchmarks/kron_precision_session.sh \
#     [bench|tests|san|sweep|tests_kron|t35|ab|san35|lat]...
# (t35: the natural mma tests of every dtype, CuPy and torch's bfloat16; ab: the defaults
# against the plans they replaced (knobs), each in its own process, --no-shuffle but the
# float64 defaults; san35: the sanitizer on those knob settings; lat: kron_latency.py on
# kron_small and the 28 real-world sizes; ring_t, half_t: the half types' ring kernel tests,
# then every natural mma test of the half types; abhalf: kron_half_ab.py, the half types' plans
# with and without their ring kernel beside our float32, one process; sanring: memcheck and
# racecheck of the half ring kernel)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=benchmarks/data
BUDGET=${BUDGET:-405}
left() { echo $((BUDGET - $(ps -o etimes= -p $PPID | tr -d ' '))); }
limit() { local l; l=$(left); echo $(( $1 < l - 5 ? $1 : l - 5 )); }
steps=${*:-bench tests san}
ONLY=${ONLY:-}  # (empty: all of kron_large)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/session.txt"
for s in $steps; do
  echo "== $s at $(date -u +%T), $(left) s left" | tee -a "$OUT/session.txt"
  case $s in
    bench)
      t=$(limit 170); [ "$t" -gt 20 ] || continue
      timeout "$t" python benchmarks/kron_gpu_compare.py --cases $D/cases.json \
        --anchors $D/h100-anchors-2026-11-22.json --sets kron_large --no-ieee \
        --dtypes float32,float64,float16,bfloat16 ${ONLY:+--only "$ONLY"} \
        --json "$OUT/kron_precision.json" 2>&1 | tee "$OUT/kron_precision.txt" ;;
    tests)
      t=$(limit 120); [ "$t" -gt 20 ] || continue
      timeout "$t" python -m pytest tests/test_kron_cuda.py -q -x -p no:cacheprovider \
        -k "natural or pick_their_kernels or dtypes_and_sides or many_passes" 2>&1 | tail -25 \
        | tee "$OUT/tests.txt" ;;
    sweep)  # the natural-order knobs on the half types and float64 (defaults: the bench rows)
      for v in "KRONLINALG_KRON_NATURAL_TI=32" "KRONLINALG_KRON_NATURAL_STAGES=3" \
               "KRONLINALG_KRON_NATURAL_TI=16"; do
        t=$(limit 40); [ "$t" -gt 15 ] || continue
        echo "-- $v" >> "$OUT/sweep.txt"
        env $v timeout "$t" python benchmarks/kron_gpu_compare.py --cases $D/cases.json \
          --anchors $D/h100-anchors-2026-11-22.json --sets kron_large --no-shuffle \
          --dtypes bfloat16,float64 --only 1024x16^5,1024x32^4,16x32^5,16x64^4,16x16^6 2>&1 \
          | grep -E "bfloat16|float64" | grep -v median >> "$OUT/sweep.txt"
      done
      t=$(limit 40); [ "$t" -gt 15 ] || continue
      echo "-- f64 KRONLINALG_KRON_NATURAL_TI_MIN=4 KRONLINALG_KRON_NATURAL_TI=4" >> "$OUT/sweep.txt"
      KRONLINALG_KRON_NATURAL_TI_MIN=4 KRONLINALG_KRON_NATURAL_TI=4 timeout "$t" python \
        benchmarks/kron_gpu_compare.py --cases $D/cases.json --anchors \
        $D/h100-anchors-2026-11-22.json --sets kron_large --no-shuffle --dtypes float64 \
        --only 1024x32^4,16x32^5,16x64^4 2>&1 | grep float64 | grep -v median >> "$OUT/sweep.txt" ;;
    tests_kron)
      t=$(limit 90); [ "$t" -gt 20 ] || continue
      timeout "$t" python -m pytest tests/test_kron.py -q -m gpu -p no:cacheprovider 2>&1 \
        | tail -15 | tee "$OUT/tests_kron.txt" ;;
    t35)
      t=$(limit 100); [ "$t" -gt 20 ] || continue
      timeout "$t" python -m pytest tests/test_kron_cuda.py -q -x -p no:cacheprovider \
        -k "mma_natural and (cupy or bfloat16)" 2>&1 | tail -15 | tee "$OUT/tests.txt" ;;
    ab)  # plan variants, one process each: "label|env|dtypes|cases|shuffle (1: time it too)"
      F64="1024x8^6,1024x16^5,1024x32^4,1024x64^3,16x8^8,16x16^6,16x32^5,16x64^4"
      H="1024x16^5,1024x32^4,1024x64^3,16x16^6,16x32^5,16x64^4"
      while IFS='|' read -r label envs dts only shuf; do
        [ -n "$label" ] || continue
        t=$(limit $([ "$shuf" = 1 ] && echo 90 || echo 45)); [ "$t" -gt 12 ] || break
        echo "-- $label ($envs)" | tee -a "$OUT/ab.txt"
        env $envs timeout "$t" python benchmarks/kron_gpu_compare.py --cases $D/cases.json \
          --anchors $D/h100-anchors-2026-11-22.json --sets kron_large --no-ieee \
          $([ "$shuf" = 1 ] || echo --no-shuffle) --dtypes "$dts" --only "$only" \
          --json "/tmp/ab_$label.json" </dev/null 2>&1 \
          | grep -E "^(1024|16)x|ERROR|median" | tee -a "$OUT/ab.txt"
        python - "/tmp/ab_$label.json" "$label" >> "$OUT/ab_plans.txt" 2>/dev/null <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(f"## {sys.argv[2]} {r['case']} {r['dtype']} {r.get('ms', 0):.3f} ms\n{r.get('plan')}")
PY
      done <<LIST
f64_base|KL_AB=0|float64|$F64,1024x8^7,1024x128^3|1
f64_old_p8|KRONLINALG_KRON_NATURAL_WARPS=4 KRONLINALG_KRON_NATURAL_TI=8|float64|1024x8^6,16x8^8,1024x8^7
half_base|KL_AB=0|float32,bfloat16|$H,1024x8^7
half_old_p32|KRONLINALG_KRON_NATURAL_T=4|bfloat16|1024x32^4
half_old_8^7|KRONLINALG_KRON_NATURAL_SHORTER=0|bfloat16|1024x8^7
LIST
      ;;
    san35)
      for tool in memcheck racecheck; do
        for v in "KRONLINALG_KRON_NATURAL_WARPS=4|float64|" \
                 "KRONLINALG_KRON_NATURAL_SHORTER=1|float64,float16|eight7"; do
          IFS='|' read -r envs dts extra <<< "$v"
          # (racecheck, slow: the new kernel forms only, not 8^7's 3 + 2 + 2 of known kernels)
          [ $tool = racecheck ] && [ "$extra" = eight7 ] && continue
          t=$(limit 45); [ "$t" -gt 15 ] || continue
          echo "-- $tool $envs $dts $extra" | tee -a "$OUT/sanitize.txt"
          env $envs timeout "$t" compute-sanitizer --tool $tool --print-limit 5 \
            python benchmarks/kron_mma_natural_sanitize.py $dts $extra 2>&1 | tail -3 \
            | tee -a "$OUT/sanitize.txt"
        done
      done ;;
    ring_t)
      t=$(limit 120); [ "$t" -gt 20 ] || continue
      timeout "$t" python -m pytest tests/test_kron_cuda.py -q -rf -p no:cacheprovider \
        -k "half_ring or half_p32 or (mma_natural_kernel_is_planned and float16)" 2>&1 \
        | grep -vE "^E  |^\s*$" | tail -25 | tee -a "$OUT/tests.txt" ;;
    half_t)
      t=$(limit 120); [ "$t" -gt 20 ] || continue
      timeout "$t" python -m pytest tests/test_kron_cuda.py -q -p no:cacheprovider \
        -k "mma_natural and (float16 or bfloat16) and not half_ring" -rf 2>&1 | tail -15 \
        | tee -a "$OUT/tests.txt" ;;
    abhalf)
      H16="1024x16^5,1024x32^4,1024x64^3,1024x128^3,16x16^6,16x32^5,16x64^4"
      t=$(limit 125); [ "$t" -gt 20 ] || continue
      timeout "$t" python benchmarks/kron_half_ab.py --cases $D/cases.json \
        --anchors $D/h100-anchors-2026-11-22.json --only "$H16" \
        --variants "${HALF_VARIANTS:-old,ring,ring64,ring32,ring64p16}" \
        --json "$OUT/kron_half_ab.json" --md "$OUT/kron_half_ab.md" 2>&1 | tee "$OUT/kron_half_ab.txt"
      t=$(limit 35); [ "$t" -gt 15 ] || continue
      # (line tiles of 4 lines: P = 16 cases only)
      timeout "$t" python benchmarks/kron_half_ab.py --cases $D/cases.json \
        --anchors $D/h100-anchors-2026-11-22.json --only 1024x16^5,16x16^6 \
        --variants ring,t4,p16t4 --json "$OUT/kron_half_ab_t4.json" 2>&1 \
        | tee -a "$OUT/kron_half_ab.txt"
      t=$(limit 30); [ "$t" -gt 15 ] || continue
      # (P = 8: no ring kernel, the plans of every variant are the same)
      timeout "$t" python benchmarks/kron_half_ab.py --cases $D/cases.json \
        --anchors $D/h100-anchors-2026-11-22.json --only 1024x8^6,1024x8^7,16x8^8 \
        --variants ring --json "$OUT/kron_half_ab_p8.json" 2>&1 | tee -a "$OUT/kron_half_ab.txt" ;;
    sanring)
      # (the default =3: every ring pass; racecheck on the small ones)
      for v in "memcheck|3|ring,ring64,ring64p16" "racecheck|3|ring"; do
        IFS='|' read -r tool mode extra <<< "$v"
        t=$(limit 45); [ "$t" -gt 15 ] || continue
        echo "-- $tool KRONLINALG_KRON_NATURAL_RING_HALF=$mode float16 $extra" \
          | tee -a "$OUT/sanitize.txt"
        KRONLINALG_KRON_NATURAL_RING_HALF=$mode timeout "$t" compute-sanitizer --tool $tool \
          --print-limit 5 python benchmarks/kron_mma_natural_sanitize.py float16 "$extra" 2>&1 \
          | tail -14 | tee -a "$OUT/sanitize.txt"
      done ;;
    lat)
      t=$(limit 120); [ "$t" -gt 20 ] || continue
      timeout "$t" python benchmarks/kron_latency.py --lib cupy --sets kron_small,real_world \
        --out "$OUT" 2>&1 | tee "$OUT/latency.txt" | grep -E "median|ERROR|Error" ;;
    san)
      for tool in memcheck racecheck; do
        t=$(limit 60); [ "$t" -gt 15 ] || continue
        timeout "$t" compute-sanitizer --tool $tool --print-limit 5 \
          python benchmarks/kron_mma_natural_sanitize.py 2>&1 | tail -8 \
          | tee -a "$OUT/sanitize.txt"
      done ;;
  esac
done
echo "== done at $(date -u +%T), $(left) s left" | tee -a "$OUT/session.txt"
