# Call A: where a norm trial's evaluate seconds go (fp32 LN+res, the bucket whose searches hit their limits),
# then the 8192x4096+res norm rows in fp16 and fp32 that the 2026-11-23 searches left at the default config.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
SINGLE='{"variant": "single", "BLOCK_N": 4096, "ROWS_PER_PROGRAM": 1, "num_warps": 8, "num_stages": 1}'
stage prof-ln32 60 python3 benchmarks/profile_trial.py layer_norm 8192x4096+res --dtype fp32 --config "$SINGLE" \
  --config '{"variant": "single", "BLOCK_N": 4096, "ROWS_PER_PROGRAM": 2, "num_warps": 16, "num_stages": 1}'
NORM="--trials 8 --timeout 20 --final-examples 40"
S rms_norm fp16 8192x4096+res 110 $NORM
S layer_norm fp16 8192x4096+res 110 $NORM
S rms_norm fp32 8192x4096+res 115 $NORM --warm-start "$SINGLE"
S layer_norm fp32 8192x4096+res 115 $NORM --warm-start "$SINGLE"
ship layer_norm rms_norm
stage verify 60 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 20
pack
