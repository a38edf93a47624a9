#!/usr/bin/env bash
# The training path on a GPU (issue 39): search, verify and bench softmax's and the norms' backwards and group_norm,
# in device calls of about 8 minutes each. From the repo root:
#
#   OUT=/path bash benchmarks/gpu_training.sh STAGE...     (stages run in the order given, all within BUDGET seconds)
#
# Stages:
#   search      search the presets still without a current row (benchmarks/missing_presets.py, as device_calls.sh's
#               search_missing: a call cut short keeps the studies it finished, the next call goes on from there),
#               kernel by kernel in TRAIN_KERNELS,
#               each in TRAIN_DTYPES, bf16 first; group_norm also at 2x1280x32x32 (issue 39's third shape) and
#               2x640x32x32, the norm backwards at 16384x2048+res (shipped buckets off the presets); then ship the rows
#               into /tmp/x/shipped.sqlite
#   verify      `autotune db verify --unverified` of TRAIN_KERNELS' rows in $AUTOTUNE_DB (VERIFY_EXAMPLES problems each)
#   bench-softmax, bench-layer-norm, bench-rms-norm, bench-group-norm
#               `autotune bench KERNEL --backward --against torch,compile,liger,copy --graphs` in BENCH_DTYPES: softmax
#               8192x4096 and 16384x8192; layer_norm and rms_norm 8192x4096 and 16384x8192, each with and without a
#               residual; group_norm + silu 8x512x64x64, 16x320x64x64, 2x1280x32x32 (32 groups); each table to
#               $OUT/bench-*.md, its JSON to /tmp/x (in r.tgz: a device call brings back few files)
#   bench-group-norm-forward
#               the forward alone against torch, compile and a copy of its bytes (issue 39's forward goal)
#   bench       all five bench stages (more than one call's time: torch.compile builds each shape's forward and
#               backward anew, tens of seconds each)
#   pack        tar /tmp/x (every stage's log, the shipped copy, the exports) into $OUT/r.tgz; give it last
#
# A bench stage reads the rows of /tmp/x/shipped.sqlite (as its user database, over the package's): what `search` and
# `verify` shipped on this machine, or, on a fresh one, the copy a call packed, carried and named SHIPPED_START (see
# device_calls.sh's header).
#
# Knobs (environment):
#   BUDGET         seconds for the whole call (default 480); each stage is cut at what is left
#   STAGE_SECS     seconds per search command, one kernel in one dtype (default 150)
#   TRAIN_KERNELS  default "softmax_backward" (the norm backwards and group_norm: name them to search their presets)
#   TRAIN_DTYPES   default "bf16 fp16 fp32"
#   TRIALS         configs per study (default 12); STUDY_TIMEOUT seconds per study (default 40)
#   EXAMPLES, FINAL_EXAMPLES   the gate's problems per trial (default 12) and for the winner (default 40)
#   VERIFY_EXAMPLES            db verify's problems per row (default 60)
#   BENCH_DTYPES   default "bf16 fp16"; BENCH_SECS seconds per bench stage (default 470); BENCH_GRAPHS="" leaves out
#                  the CUDA-graph timings (default: --graphs)
#   LIGER          a directory holding the liger_kernel package, put on PYTHONPATH (the GPU machine reaches no
#                  registry: `pip install --no-deps --target .ci/liger liger-kernel==0.8.5` beside the repo, and
#                  carry .ci/liger); without it the bench says liger-kernel is not installed and leaves its column out
#   SHIPPED_START, GPU, AUTOTUNE_DB  as in device_calls.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-480}
[ -n "${LIGER:-}" ] && export PYTHONPATH="$(cd "$LIGER" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
# shellcheck source=device_calls.sh
. benchmarks/device_calls.sh
KERNELS=${TRAIN_KERNELS:-softmax_backward}
DTYPES=${TRAIN_DTYPES:-bf16 fp16 fp32}
GROUP_NORM_THIRD=2x1280x32x32,groups=32,activation=silu
stamp=$(date -u +%Y-%m-%d)
search_args=(--trials "${TRIALS:-12}" --timeout "${STUDY_TIMEOUT:-40}" --examples "${EXAMPLES:-12}"
             --final-examples "${FINAL_EXAMPLES:-40}")

warm_starts() {  # the norm backwards' winners before BLOCK_M (a shape's constraints reject the others at no cost)
  case $1 in
    layer_norm_backward|rms_norm_backward)
      echo '--warm-start {"variant":"partials","BLOCK_N":4096,"READS":1,"PROGRAMS_PER_SM":1,"num_warps":8,"num_stages":1}'
      echo '--warm-start {"variant":"partials","BLOCK_N":8192,"READS":1,"PROGRAMS_PER_SM":1,"num_warps":16,"num_stages":1}'
      echo '--warm-start {"variant":"atomic","BLOCK_N":8192,"READS":2,"PROGRAMS_PER_SM":2,"num_warps":16,"num_stages":3}' ;;
  esac
}

also_shapes() {  # buckets searched beside the presets: issue 39's third group_norm shape, and the shipped H100 rows'
  case $1 in      # buckets off the presets, which a source change left unserved
    group_norm) echo "--also=$GROUP_NORM_THIRD --also=2x640x32x32,groups=32,activation=silu" ;;
    layer_norm_backward|rms_norm_backward) echo "--also=16384x2048+res" ;;
  esac
}

search_all() {
  local dtype kernel shapes
  for dtype in $DTYPES; do
    for kernel in $KERNELS; do
      # shellcheck disable=SC2046
      shapes=$(python3 benchmarks/missing_presets.py "$kernel" "$dtype" "$GPU" /tmp/x/shipped.sqlite "$AUTOTUNE_DB" \
        $(also_shapes "$kernel"))
      if [ -z "$shapes" ]; then echo "search $kernel $dtype: none missing" | tee -a /tmp/x/calls.log; continue; fi
      # shellcheck disable=SC2046,SC2086  # word splitting wanted: lists of arguments
      stage "s-$kernel-$dtype-$(date +%H%M%S)" "${STAGE_SECS:-150}" at search "$kernel" --gpu "$GPU" --dtype "$dtype" \
        $shapes "${search_args[@]}" $(warm_starts "$kernel")
    done
  done
  ship $KERNELS
}

bench_stage() {  # NAME KERNEL PASS AGAINST SHAPE...: KERNEL on the shapes in BENCH_DTYPES; PASS --backward or ""
  local name=$1 kernel=$2 pass=$3 against=$4 dtypes="" shapes="" d s; shift 4
  for d in ${BENCH_DTYPES:-bf16 fp16}; do dtypes="$dtypes --dtype $d"; done
  for s in "$@"; do shapes="$shapes --shape $s"; done
  # The rows this call shipped (and those carried in as SHIPPED_START): the tuned calls launch what would ship.
  local user_db=$AUTOTUNE_DB
  export AUTOTUNE_DB=/tmp/x/shipped.sqlite
  # shellcheck disable=SC2086
  stage "$name" "${BENCH_SECS:-470}" at bench "$kernel" $pass --against "$against" ${BENCH_GRAPHS---graphs} --gpu "$GPU" \
    $dtypes $shapes \
    --out "/tmp/x/$name-$GPU-$stamp"
  export AUTOTUNE_DB=$user_db
  cp "/tmp/x/$name-$GPU-$stamp.md" "$OUT/" 2>/dev/null  # the table; the JSON comes back in r.tgz (pack)
}

PEERS=torch,compile,liger,copy
run() {
  case $1 in
    search) search_all ;;
    verify)
      local kernels="" k
      for k in $KERNELS; do kernels="$kernels --kernel $k"; done
      # shellcheck disable=SC2086
      stage verify "$BUDGET" at db verify --gpu "$GPU" --db "$AUTOTUNE_DB" $kernels --unverified \
        --examples "${VERIFY_EXAMPLES:-60}"
      cp /tmp/x/verify.log "$OUT/verify-$GPU-$stamp.txt"
      ship $KERNELS ;;
    bench-softmax) bench_stage bench-softmax softmax --backward $PEERS 8192x4096 16384x8192 ;;
    bench-layer-norm) bench_stage bench-layer-norm layer_norm --backward $PEERS 8192x4096+res 16384x8192+res 8192x4096 \
      16384x8192 ;;
    bench-rms-norm) bench_stage bench-rms-norm rms_norm --backward $PEERS 8192x4096+res 16384x8192+res 8192x4096 16384x8192 ;;
    bench-group-norm) bench_stage bench-group-norm group_norm --backward $PEERS 8x512x64x64,groups=32,activation=silu \
      16x320x64x64,groups=32,activation=silu "$GROUP_NORM_THIRD" ;;
    bench-group-norm-forward) bench_stage bench-group-norm-forward group_norm "" torch,compile,copy \
      8x512x64x64,groups=32,activation=silu 16x320x64x64,groups=32,activation=silu "$GROUP_NORM_THIRD" ;;
    bench) for b in bench-softmax bench-layer-norm bench-rms-norm bench-group-norm bench-group-norm-forward; do run "$b"; done ;;
    pack) pack ;;
    *) echo "unknown stage $1 (expected search, verify, bench-softmax, bench-layer-norm, bench-rms-norm," \
            "bench-group-norm, bench-group-norm-forward, bench, pack)"; exit 2 ;;
  esac
}

for what in "$@"; do run "$what"; done
