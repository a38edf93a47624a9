# Call 3: flash_attn head dim 64 presets re-searched, warm-started from the sweep's winners (64x128 w4 s2 etc.);
# the store starts as the shipped file, so each study also times the shipped row's config.
[ -f /tmp/attn-tuned.sqlite ] || cp autotune/db/shipped.sqlite /tmp/attn-tuned.sqlite
export AUTOTUNE_DB=/tmp/attn-tuned.sqlite
BUDGET=590 SHIPPED_START=${SHIPPED_START:-autotune/db/shipped.sqlite}; . benchmarks/device_calls.sh
B='"KV_SPLITS": 1, "gqa": "per_head", "kv_load": "descriptor", "mask": "edges", "p": "rounded"'
W=(--warm-start "{\"BLOCK_M\": 64, \"BLOCK_N\": 128, \"num_warps\": 4, \"num_stages\": 2, $B}"
   --warm-start "{\"BLOCK_M\": 128, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 3, $B}"
   --warm-start "{\"BLOCK_M\": 64, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 2, $B}")
SH=()
for n in ${NS:-1024 2048 4096 8192 16384}; do for c in "" "+causal"; do SH+=(--shape "$((16384 / n))x16x${n}x64$c"); done; done
for d in ${DTYPES:-bf16 fp16}; do
  stage "s-flash_attn-$d-d64" ${SECS:-285} at search flash_attn --gpu H100 --dtype $d "${SH[@]}" "${W[@]}" \
    --trials 7 --timeout 45 --examples 4 --final-examples 30
done
ship flash_attn
pack
