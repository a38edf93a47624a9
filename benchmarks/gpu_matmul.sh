#!/usr/bin/env bash
# The matmul family's GPU work, in stages of at most ~9 minutes each: bash benchmarks/gpu_matmul.sh STAGE...
#
#   check          GPU, versions, TMA availability
#   tests          pytest -m gpu for matmul, linear, mlp (bf16 included: the interpreter cannot run bf16 tl.dot)
#   search-mm1     autotune search matmul, bf16: 4096^3, 8192^3, 8192x4096x4096
#   search-mm2     autotune search matmul, bf16: M=8192 with (K, N) = (4096, 14336), (14336, 4096), (4096, 16384)
#   search-linear  autotune search linear, bf16: the goal shape 8192x4096x16384 (bias, gelu_tanh) and mlp's two products
#   search-mlp     autotune search mlp, bf16 (after search-linear: the two_pass variant launches linear's rows)
#   compare        benchmarks/compare.py on the goal shapes: TFLOP/s, % of cuBLAS, vs eager and torch.compile
#   quality-grid   benchmarks/search_quality.py: the whole valid grid of matmul bf16 256x4096x4096, then TPE and
#                  random replayed on it (resumable: run again until it says the grid is complete). GP's replay
#                  needs no GPU (its time per ask grows with the study): run it on any machine, on the returned
#                  table: python benchmarks/search_quality.py --kernel matmul --dtype bf16 --gate timed \
#                    --shape 256x4096x4096 --samplers gp,tpe,random --seeds 5 --replay-cap 250 --replay-only \
#                    --table benchmarks/results/H100/quality-table-matmul-bf16.json --out /tmp/search-quality-matmul-grid-gp
#   quality-live   TPE, GP and random live on 4096^3 and 8192x4096x14336, or LIVE_SHAPES (resumable the same way)
#
# Knobs: TRIALS (configs per study), STUDY_TIMEOUT (seconds per study, default 110), STAGE_SECONDS (per stage).
# Everything lands in $OUT: the config database ($AUTOTUNE_DB, default $OUT/tuned.sqlite), logs, results.
# The quality table ($OUT/quality-table-matmul-bf16.json) lets a stage continue in a later session: copy the
# returned file to benchmarks/results/$GPU/ before the next call; it is copied back into $OUT first. Likewise a
# tuned.sqlite under benchmarks/results/ is taken as the starting database (search-mlp needs linear's rows).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export AUTOTUNE_DB=${AUTOTUNE_DB:-$OUT/tuned.sqlite}
GPU=${GPU:-H100}
STAGE_SECONDS=${STAGE_SECONDS:-520}
stamp=$(date -u +%Y-%m-%d)
TABLE=$OUT/quality-table-matmul-bf16.json
[ -f "benchmarks/results/$GPU/quality-table-matmul-bf16.json" ] && [ ! -f "$TABLE" ] && cp "benchmarks/results/$GPU/quality-table-matmul-bf16.json" "$TABLE"
[ -f benchmarks/results/tuned.sqlite ] && [ ! -f "$AUTOTUNE_DB" ] && cp benchmarks/results/tuned.sqlite "$AUTOTUNE_DB"
at() { python3 -m autotune "$@"; }
search() {  # KERNEL TRIALS TIMEOUT SHAPE...: one study per shape, bf16; the table and where the time went
  local kernel=$1 trials=$2 timeout=$3; shift 3
  local shapes=(); for s in "$@"; do shapes+=(--shape "$s"); done
  timeout "$STAGE_SECONDS" python3 -m autotune search "$kernel" --gpu "$GPU" --dtype bf16 --trials "$trials" \
    --timeout "$timeout" "${shapes[@]}" >>"$OUT/search-$kernel.log" 2>>"$OUT/search-$kernel.err"
  echo "exit $?"; tail -12 "$OUT/search-$kernel.log"; grep evaluated "$OUT/search-$kernel.err"
}
for stage in "$@"; do
  echo "=== $stage $(date -u +%T) (${SECONDS}s)"
  case $stage in
    check)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
      python3 -c 'import torch, triton, optuna; print(torch.__version__, triton.__version__, optuna.__version__)'
      python3 -c 'import autotune; from autotune.search_spaces import matmul as s; print("TMA:", s.tma_available(), "smem, SMs:", s.hardware())'
      at gpu
      ;;
    tests)
      timeout "$STAGE_SECONDS" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_matmul.py \
        tests/test_linear_and_mlp.py 2>&1 | tee "$OUT/gpu-tests-matmul.log" | tail -40 ;;
    search-mm1)
      search matmul "${TRIALS:-60}" "${STUDY_TIMEOUT:-110}" 4096x4096x4096 8192x8192x8192 8192x4096x4096 ;;
    search-mm2)
      search matmul "${TRIALS:-60}" "${STUDY_TIMEOUT:-110}" 8192x4096x14336 8192x14336x4096 8192x4096x16384 ;;
    search-linear)
      search linear "${TRIALS:-60}" "${STUDY_TIMEOUT:-110}" 8192x4096x16384,bias,gelu_tanh 8192x16384x4096,bias 8192x4096x4096,bias ;;
    search-mlp)
      search mlp "${TRIALS:-40}" "${STUDY_TIMEOUT:-110}" 8192x4096x16384x4096 8192x1024x4096x256 ;;
    compare)
      timeout "$STAGE_SECONDS" python3 benchmarks/compare.py --dtype bf16 --kernel matmul --kernel linear --kernel mlp \
        --shape matmul=4096x4096x4096 --shape matmul=8192x8192x8192 --shape matmul=8192x4096x4096 \
        --shape matmul=8192x4096x14336 --shape matmul=8192x14336x4096 --shape matmul=8192x4096x16384 \
        --shape linear=8192x4096x16384,bias,gelu_tanh --shape mlp=8192x4096x16384x4096 \
        --out "$OUT/compare-matmul-$GPU-$stamp" ;;
    quality-grid)
      python3 benchmarks/search_quality.py --kernel matmul --dtype bf16 --gate timed --shape 256x4096x4096 \
        --samplers tpe,random --seeds "${SEEDS:-10}" --replay-cap 400 --table "$TABLE" --seconds "$STAGE_SECONDS" \
        --out "$OUT/search-quality-matmul-grid-$GPU-$stamp"
      echo "exit $? (3: incomplete, run the stage again with the returned table)" ;;
    quality-live)
      python3 benchmarks/search_quality.py --kernel matmul --dtype bf16 --gate timed $(for s in ${LIVE_SHAPES:-4096x4096x4096 8192x4096x14336}; do echo --live-shape "$s"; done) \
        --samplers tpe,gp,random --seeds "${SEEDS_LIVE:-3}" --budget 40 --table "$TABLE" \
        --seconds "$STAGE_SECONDS" --out "$OUT/search-quality-matmul-live-$GPU-$stamp"
      echo "exit $? (3: incomplete, run the stage again with the returned table)" ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
