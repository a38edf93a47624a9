# Call 5: same-run comparison against sdpa's backends at head dim 64 with the re-searched rows (bf16, fp16).
BUDGET=560 SHIPPED_START=${SHIPPED_START:-autotune/db/shipped.sqlite}; . benchmarks/device_calls.sh
SH=()
for n in 1024 2048 4096 8192 16384; do for c in "" "+causal"; do SH+=(--shape "$((16384 / n))x16x${n}x64$c"); done; done
export AUTOTUNE_DB=/tmp/x/shipped.sqlite; stage compare-d64 520 python3 benchmarks/compare_attention.py --dtype bf16 --dtype fp16 "${SH[@]}" --out /tmp/x/compare-attention-d64-H100
pack
