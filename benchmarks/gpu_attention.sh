#!/usr/bin/env bash
# flash_attn's GPU work, in stages that each fit one device call (< 9 minutes on an H100):
#   OUT=... bash benchmarks/gpu_attention.sh STAGE...
# Stages, in the order worth running them:
#   check                  GPU, versions, the shared GPU test of every kernel's default (tests/test_gpu.py) for
#                          flash_attn and its backward, and peak memory at N = 32k
#   gpu-tests              the gpu-marked attention tests: variants verified near the preset shapes
#   gate-fwd  gate-bwd     the CPU suite's gate tests compiled for the GPU (every correctness case, variant, head dim)
#   fwd:DTYPE:D:PART       search flash_attn on one part of the presets: PART = full | causal (N = 1k..16k, 16k
#                          tokens, 16 heads) | decode (D = 128 only); DTYPE = bf16 | fp16; D = 64 | 128
#   bwd:DTYPE:D:PART       search flash_attn_backward likewise (PART = full | causal)
#   compare:DTYPE          same-run benchmark against sdpa's flash, cuDNN and efficient backends, every preset
#   cold:DTYPE:SHAPE       `search --cold` of one shape (TRIALS, STUDY_TIMEOUT) against the best known row
#   export                 the tuned attention rows as a database of their own, to ship or merge
#   gluon:DTYPE            the Gluon forward for Hopper (hopper_forward.py): its config grid checked against
#                          float64 and timed against flash_attn and sdpa's cuDNN and flash (hopper_attention_probe.py)
#   gluon-bwd:DTYPE        the Gluon backward likewise, forward + backward against sdpa's cuDNN, flash and default
#                          (hopper_attention_backward_probe.py; QUICK=1 for its first 3 configs)
# For the issue's goals (bf16, D = 128), in this order:
#   check  fwd:bf16:128:full  fwd:bf16:128:causal  fwd:bf16:128:decode  bwd:bf16:128:full  bwd:bf16:128:causal
#   compare:bf16  gpu-tests  gate-fwd  gate-bwd  export
# The config database is $AUTOTUNE_DB (default benchmarks/results/attention-tuned.sqlite: untracked, so it
# travels with the working tree to the next call); every stage copies it and its logs to $OUT (keep to
# two stages per call: a call returns at most 8 files).
# Knobs: NS (sequence lengths of the full and causal parts, e.g. NS=4096 for the goal shape alone),
# TRIALS (distinct configs per study, default 40), STUDY_TIMEOUT (seconds of search per study, 30),
# EXAMPLES and FINAL_EXAMPLES (problems each trial, and the winner, is verified on: 20 and 100). The backward
# compiles 2-3 kernels per problem (the two backward calls of 2026-11-23 finished no trial in 5 minutes at 20):
# try EXAMPLES=8 FINAL_EXAMPLES=40 STUDY_TIMEOUT=120; `autotune db verify` re-checks the rows on 200 later.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export AUTOTUNE_DB=${AUTOTUNE_DB:-$PWD/benchmarks/results/attention-tuned.sqlite}
GPU=${GPU:-H100}
TRIALS=${TRIALS:-40}
STUDY_TIMEOUT=${STUDY_TIMEOUT:-30}
EXAMPLES=${EXAMPLES:-20}
FINAL_EXAMPLES=${FINAL_EXAMPLES:-100}
NS=${NS:-1024 2048 4096 8192 16384}  # the sequence lengths of the full and causal parts (16k tokens each)
stamp=$(date -u +%Y-%m-%d)
TESTS="tests/test_flash_attn.py tests/test_flash_attn_backward.py"

shapes() {  # head_dim part: the preset shapes of autotune/kernels/attention/problems.py
  local d=$1 part=$2 n
  case $part in
    full|causal)
      for n in $NS; do
        echo "--shape $((16384 / n))x16x${n}x${d}$([ "$part" = causal ] && echo +causal)"
      done ;;
    decode) echo "--shape 16x16x1:4096x$d --shape 2x16/4x1:32768x$d" ;;
    *) echo "unknown part $part (full, causal, decode)" >&2; return 2 ;;
  esac
}

# The backward's first trials besides the default (16x16 tiles, 25 ms at 4x16x4096x128): FlashAttention-2's
# tiles for head dim 128 (keys held 128 or 64 at a time, queries streamed 32 or 64), delta recomputed (from the
# output, delta fails the gate where softmax rows saturate: causal with Nq < Nk), dS split (rounded, every
# config failed the H100's final check on Nq = 1, Nk = 1021). Each passes the CPU gate in fp16 and bf16.
BWD_WARM_STARTS=${BWD_WARM_STARTS:-'{"BLOCK_M":32,"BLOCK_N":128,"num_warps":8,"num_stages":2,"dq":"separate","delta":"recomputed","ds":"split"}
{"BLOCK_M":64,"BLOCK_N":64,"num_warps":4,"num_stages":2,"dq":"separate","delta":"recomputed","ds":"split"}
{"BLOCK_M":32,"BLOCK_N":128,"num_warps":8,"num_stages":2,"dq":"atomic","delta":"recomputed","ds":"split"}'}

# The forward's first trials: the configs of its H100 rows (2026-11-23: every prefill preset, and the two
# decode shapes), and the prefill one with 8 warps and 128x128 tiles. P split is what the fp16 decode shapes
# need (rounded failed fp16's gate at Nq = 1, Nk = 16381).
FWD_WARM_STARTS=${FWD_WARM_STARTS:-'{"BLOCK_M":128,"BLOCK_N":64,"num_warps":4,"num_stages":2,"mask":"edges","kv_load":"descriptor","p":"rounded"}
{"BLOCK_M":128,"BLOCK_N":128,"num_warps":8,"num_stages":2,"mask":"edges","kv_load":"descriptor","p":"rounded"}
{"BLOCK_M":16,"BLOCK_N":64,"num_warps":4,"num_stages":2,"mask":"every","p":"split"}
{"BLOCK_M":16,"BLOCK_N":64,"num_warps":2,"num_stages":2,"mask":"every","KV_SPLITS":32,"gqa":"packed","p":"split"}'}

search() {  # kernel dtype head_dim part
  local kernel=$1 dtype=$2 d=$3 part=$4 args log="$OUT/search-$1-$2-$3-$4" warm=() config
  args=$(shapes "$d" "$part") || return 2
  local starts=$FWD_WARM_STARTS; [ "$kernel" = flash_attn_backward ] && starts=$BWD_WARM_STARTS
  while read -r config; do [ -n "$config" ] && warm+=(--warm-start "$config"); done <<<"$starts"
  # shellcheck disable=SC2086
  python3 -m autotune search "$kernel" --gpu "$GPU" --dtype "$dtype" $args "${warm[@]}" \
    --trials "$TRIALS" --timeout "$STUDY_TIMEOUT" --examples "$EXAMPLES" --final-examples "$FINAL_EXAMPLES" \
    >"$log.log" 2>"$log.err"
  local rc=$?
  cat "$log.log"; grep -E "evaluated|final check|Error|error" "$log.err" | tail -20
  return $rc
}

status=0
for stage in "$@"; do
  echo "=== $stage $(date -u +%T) (${SECONDS}s)"
  IFS=: read -r what dtype d part <<<"$stage"
  case $what in
    check)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
      python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.backends.cudnn.version())'
      python3 -m autotune gpu
      python3 -m pytest -q -m gpu tests/test_gpu.py -k flash_attn \
        tests/test_flash_attn.py::test_peak_memory_grows_linearly_not_quadratically \
        -p no:cacheprovider 2>&1 | tee "$OUT/tests-check.log" | tail -15 ;;
    gpu-tests)
      # shellcheck disable=SC2086
      python3 -m pytest -q -m gpu $TESTS -k "not memory" -p no:cacheprovider 2>&1 | tee "$OUT/tests-gpu.log" | tail -15 ;;
    gate-fwd|gate-bwd)
      file=tests/test_flash_attn.py; [ "$what" = gate-bwd ] && file=tests/test_flash_attn_backward.py
      python3 -m pytest -q "$file" -k gate -p no:cacheprovider 2>&1 | tee "$OUT/tests-$what.log" | tail -15 ;;
    fwd) search flash_attn "$dtype" "$d" "$part" ;;
    bwd) search flash_attn_backward "$dtype" "$d" "$part" ;;
    compare) python3 benchmarks/compare_attention.py --dtype "$dtype" --out "$OUT/compare-attention-$dtype-$GPU-$stamp" ;;
    cold)  # cold:DTYPE:SHAPE: a search that reads no database, against the best known row (issue 38's 3% in 5 minutes)
      python3 benchmarks/cold_search.py --kernel flash_attn --dtype "$dtype" --shape "$d" --trials "$TRIALS" \
        --timeout "$STUDY_TIMEOUT" --out "$OUT/cold-search-flash_attn-$dtype-$GPU" ;;
    gluon) python3 benchmarks/hopper_attention_probe.py --dtype "$dtype" --timeout 240 \
      --out "$OUT/hopper-attention-probe-$dtype-$GPU-$stamp" ;;
    gluon-bwd) python3 benchmarks/hopper_attention_backward_probe.py --dtype "$dtype" --timeout 150 \
      ${QUICK:+--quick} --out "$OUT/hopper-attention-backward-probe-$dtype-$GPU-$stamp" ;;
    export)
      rm -f "$OUT/attention-$GPU.sqlite"
      python3 -m autotune db export --gpu "$GPU" -o "$OUT/attention-$GPU.sqlite" &&
        python3 -m autotune query flash_attn --gpu "$GPU" &&
        python3 -m autotune query flash_attn_backward --gpu "$GPU" ;;
    *) echo "unknown stage $stage"; false ;;
  esac
  rc=$?
  [ "$rc" = 0 ] || { echo "stage $stage failed ($rc)"; status=1; }
  if [ -f "$AUTOTUNE_DB" ]; then cp "$AUTOTUNE_DB" "$OUT/attention-tuned.sqlite"; fi
done
exit $status
