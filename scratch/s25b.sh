# Call B: the 16384x8192+res norm rows the 2026-11-23 searches left at a looped or default config (fp16, fp32),
# then a same-run bench of layer_norm and rms_norm in fp16 and fp32 at the presets (the rows of calls A and B).
BUDGET=585 SHIPPED_START=scratch/shipped-25a.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
NORM="--trials 8 --timeout 20 --final-examples 40"
S layer_norm fp16 16384x8192+res 120 $NORM
S rms_norm fp16 16384x8192+res 120 $NORM
S layer_norm fp32 16384x8192+res 130 $NORM --warm-start '{"variant": "single", "BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1, "num_warps": 8, "num_stages": 1}' \
  --warm-start '{"variant": "single", "BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1, "num_warps": 16, "num_stages": 1}'
ship layer_norm rms_norm
stage verify 50 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 20
export AUTOTUNE_DB=/tmp/x/shipped.sqlite
stage bench 150 at bench layer_norm rms_norm --gpu H100 --dtype fp16 --dtype fp32 --graphs --out /tmp/x/bench-norms-fp16-fp32-H100
pack
