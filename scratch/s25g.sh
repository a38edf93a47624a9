# Call G (H200): the two H200 rows left at the default config (softmax fp16 4096x1024, rms_norm fp16 8192x4096),
# then the H200's first float32 norm rows (layer_norm and rms_norm 8192x4096+res, layer_norm 8192x4096).
GPU=H200 BUDGET=585 SHIPPED_START=scratch/shipped-25g.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H200 --dtype "$d" --shape "$shape" "$@"; }
NORM="--trials 8 --timeout 20 --final-examples 40"
SINGLE='{"variant": "single", "BLOCK_N": 4096, "ROWS_PER_PROGRAM": 1, "num_warps": 8, "num_stages": 1}'
S softmax fp16 4096x1024 70 $NORM
S rms_norm fp16 8192x4096 90 $NORM
S layer_norm fp32 8192x4096+res 100 $NORM --warm-start "$SINGLE"
S rms_norm fp32 8192x4096+res 90 $NORM --warm-start "$SINGLE"
S layer_norm fp32 8192x4096 90 $NORM --warm-start "$SINGLE"
ship softmax layer_norm rms_norm
stage verify 60 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --unverified --examples 20
pack
