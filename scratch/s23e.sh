# Call E: linear's n=256 row (mlp's second GEMM) re-searched by GPU time; fp16 rows of this session's new buckets.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
S linear bf16 8192x4096x256,bias 170 --trials 16 --timeout 110 --examples 6 --final-examples 30
ship linear
S group_norm_backward fp16 4x256x64x64,groups=32,activation=silu 85 --trials 8 --timeout 20 --final-examples 40
S layer_norm fp16 2048x4096+res 110 --trials 8 --timeout 20 --final-examples 40
S rms_norm fp16 2048x4096+res 95 --trials 8 --timeout 20 --final-examples 40
ship group_norm_backward layer_norm rms_norm
stage verify 80 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
pack
