#!/usr/bin/env bash
# The GPU work of one device session, in stages: bash benchmarks/gpu_session.sh STAGE...
# Stages: check | search-add | search-softmax | search-fix | search-norms | reverify | gpu-tests | compare | compare-norms
#         | bench | bench-attention | hot-path | norm-host-path | patch-host-cost | quality | off-bucket | multi-gpu
#         | faults
# bench, bench-attention: `autotune bench` (tuned vs default vs eager vs torch.compile, table + PNG) of every
# shipped kernel in BENCH_DTYPES (default bf16) on its presets, the attention pair apart (each under ~10 minutes);
# BENCH_GRAPHS=1 adds CUDA-graph timings (the GPU's time without the host's).
# off-bucket: the runtime's config against a search of that exact shape, on shapes between the tuned buckets of
# the memory-bound kernels (bf16; OFFBUCKET_KERNELS, OFFBUCKET_TRIALS, OFFBUCKET_TIMEOUT; about 7 minutes on an H100).
# The config database is $AUTOTUNE_DB (default $OUT/tuned.sqlite); logs go to $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export AUTOTUNE_DB=${AUTOTUNE_DB:-$OUT/tuned.sqlite}
GPU=${GPU:-H100}
NORM_KERNELS=${NORM_KERNELS:-layer_norm rms_norm group_norm layer_norm_backward rms_norm_backward group_norm_backward}
stamp=$(date -u +%Y-%m-%d)
at() { python3 -m autotune "$@"; }
for stage in "$@"; do
  echo "=== $stage $(date -u +%T) (${SECONDS}s)"
  case $stage in
    check)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
      python3 -c 'import torch, triton, optuna, sqlalchemy; print(torch.__version__, triton.__version__, optuna.__version__, sqlalchemy.__version__)'
      at gpu
      at verify vector_add --examples 60 && at verify softmax --examples 60
      ;;
    search-add)
      at search vector_add --gpu "$GPU" --trials "${TRIALS_ADD:-30}" --dtype bf16 --dtype fp16 --dtype fp32 2>&1 | tee -a "$OUT/search.log" | grep -v '%|' ;;
    search-softmax)
      at search softmax --gpu "$GPU" --trials "${TRIALS_SOFTMAX:-40}" ${STUDY_TIMEOUT:+--timeout $STUDY_TIMEOUT} --dtype bf16 --dtype fp16 --dtype fp32 >>"$OUT/search.log" 2>>"$OUT/search.err"
      tail -40 "$OUT/search.log"; grep evaluated "$OUT/search.err" ;;
    search-fix)
      at search softmax --gpu "$GPU" --trials 36 --timeout 40 --dtype fp32 --shape 4096x32768 --shape 1024x131072 >>"$OUT/search.log" 2>>"$OUT/search.err"
      tail -4 "$OUT/search.log"; grep evaluated "$OUT/search.err" ;;
    search-norms)  # NORM_KERNELS, NORM_DTYPES, TRIALS_NORM, STUDY_TIMEOUT narrow it
      for kernel in $NORM_KERNELS; do
        for dtype in ${NORM_DTYPES:-bf16 fp16 fp32}; do
          at search "$kernel" --gpu "$GPU" --trials "${TRIALS_NORM:-30}" ${STUDY_TIMEOUT:+--timeout $STUDY_TIMEOUT} --dtype "$dtype" \
            >>"$OUT/search.log" 2>>"$OUT/search.err"
          tail -5 "$OUT/search.log"; grep evaluated "$OUT/search.err" | tail -3
        done
      done ;;
    compare-norms)
      kernels=""; for k in $NORM_KERNELS; do kernels="$kernels --kernel $k"; done
      python3 benchmarks/compare.py $kernels ${COMPARE_DTYPES:---dtype bf16} --out "$OUT/compare-norms-$GPU-$stamp" ;;
    compare)
      python3 benchmarks/compare.py --kernel vector_add --kernel softmax --out "$OUT/compare-$GPU-$stamp" ;;
    bench|bench-attention)
      kernels="vector_add softmax $NORM_KERNELS matmul linear mlp"; name=bench
      [ "$stage" = bench-attention ] && kernels="flash_attn flash_attn_backward" && name=bench-attention
      dtypes=""; for d in ${BENCH_DTYPES:-bf16}; do dtypes="$dtypes --dtype $d"; done
      # shellcheck disable=SC2086
      at bench $kernels --gpu "$GPU" $dtypes ${BENCH_GRAPHS:+--graphs} --plot "$OUT/$name-$GPU-$stamp.png" --out "$OUT/$name-$GPU-$stamp" ;;
    hot-path)
      python3 benchmarks/hot_path.py --out "$OUT/hot-path-$GPU-$stamp" ;;
    norm-host-path)  # BEFORE_TREE: an older tree (its autotune/ extracted) to compare the norms' host path with
      trees="--tree after=."; [ -n "${BEFORE_TREE:-}" ] && trees="--tree before=$BEFORE_TREE $trees"
      # shellcheck disable=SC2086
      python3 benchmarks/norm_host_path.py --launch real $trees --rounds 3 --out "$OUT/hostpath-$GPU-$stamp"
      python3 benchmarks/public_vs_launch.py --kernel layer_norm --shape 8192x4096 --kernel layer_norm --shape 8192x4096+res \
        --kernel rms_norm --shape 8192x4096 --kernel rms_norm --shape 8192x4096+res \
        --kernel group_norm --shape 8x512x64x64,groups=32,activation=silu \
        --kernel group_norm_backward --shape 8x512x64x64 --kernel group_norm_backward --shape 16x320x64x64 \
        --kernel layer_norm_backward --shape 8192x4096+res --dtype bf16 2>&1 \
        | tee "$OUT/public-vs-launch-$GPU-$stamp.txt" ;;
    patch-host-cost)  # BEFORE_TREE: an older tree (its autotune/ extracted) to compare the patched models' host cost with
      trees="--tree after=."; [ -n "${BEFORE_TREE:-}" ] && trees="--tree before=$BEFORE_TREE $trees"
      # shellcheck disable=SC2086
      python3 benchmarks/patch_host_cost.py --compile $trees --rounds 3 --out "$OUT/patch-host-cost-$GPU-$stamp" ;;
    reverify)
      # Every row of this GPU on a fresh seed (printed on stderr; REVERIFY_SEED repeats one); each outcome is
      # recorded on its row, the table also goes to $OUT.
      # REVERIFY_KERNELS narrows it to some kernels, REVERIFY_UNVERIFIED=1 to rows never re-verified.
      kernels=""; for k in ${REVERIFY_KERNELS:-}; do kernels="$kernels --kernel $k"; done
      # shellcheck disable=SC2086
      at db verify --gpu "$GPU" --db "$AUTOTUNE_DB" $kernels --examples "${REVERIFY_EXAMPLES:-200}" ${REVERIFY_SEED:+--seed "$REVERIFY_SEED"} \
        ${REVERIFY_UNVERIFIED:+--unverified} \
        | tee "$OUT/reverify-$GPU-$stamp.txt" ;;
    gpu-tests)
      python3 -m pytest -q -m gpu tests/ -p no:cacheprovider ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} ;;
    faults)
      python3 benchmarks/fault_injection.py --out "$OUT/fault-injection-$GPU-$stamp" ;;
    quality)
      python3 benchmarks/search_quality.py --kernel softmax --dtype bf16 ${QUALITY_SHAPES:---shape 4096x4096 --shape 4096x32768 --shape 1024x131072} --out "$OUT/search-quality-$GPU-$stamp" ;;
    off-bucket)
      kernels=""; for k in ${OFFBUCKET_KERNELS:-vector_add softmax layer_norm rms_norm group_norm}; do kernels="$kernels --kernel $k"; done
      # shellcheck disable=SC2086
      python3 benchmarks/off_bucket.py $kernels --dtype bf16 --trials "${OFFBUCKET_TRIALS:-30}" --timeout "${OFFBUCKET_TIMEOUT:-20}" \
        --final-examples 50 --out "$OUT/off-bucket-$GPU-$stamp" ;;
    multi-gpu)
      python3 benchmarks/multi_gpu.py --kernel softmax --dtype bf16 --shape 4096x4096 --trials "${TRIALS_MULTI:-60}" --gpus 2 --runs "${MULTI_RUNS:-}" --out "$OUT/multi-gpu-$GPU-$stamp" ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
