# Call C: why layer_norm fp32's single-pass config fails at 16384x8192+res; the bf16 8192x4096+res row re-searched
# with the fp16 winner (1 row a program, 8 warps) beside the stored one; then the bf16 norms against compile.
BUDGET=585 SHIPPED_START=scratch/shipped-25b.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
stage verify-ln32 90 at verify layer_norm --dtype fp32 --examples 30 --config '{"variant": "single", "BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1, "num_warps": 8, "num_stages": 1}'
stage check-ln32 60 python3 scratch/edges25.py layer_norm 16384x8192+res fp32 '{"variant": "single", "BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1, "num_warps": 8, "num_stages": 1}'
S layer_norm bf16 8192x4096+res 120 --trials 8 --timeout 20 --final-examples 40 \
  --warm-start '{"variant": "single", "BLOCK_N": 4096, "ROWS_PER_PROGRAM": 4, "num_warps": 16, "num_stages": 1}' \
  --warm-start '{"variant": "single", "BLOCK_N": 4096, "ROWS_PER_PROGRAM": 1, "num_warps": 8, "num_stages": 1}'
ship layer_norm
stage verify 40 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 20
export AUTOTUNE_DB=/tmp/x/shipped.sqlite
stage bench 150 at bench layer_norm rms_norm --gpu H100 --dtype bf16 --graphs --out /tmp/x/bench-norms-bf16-H100
pack
