# Call 6: float32 rows of this and last session's new norm buckets; db verify of them.
BUDGET=400 SHIPPED_START=${SHIPPED_START:-autotune/db/shipped.sqlite}; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
S group_norm fp32 2x640x32x32,groups=32,activation=silu 75 --trials 8 --timeout 20 --final-examples 40
S layer_norm_backward fp32 16384x2048+res 75 --trials 8 --timeout 20 --final-examples 40
S rms_norm_backward fp32 16384x2048+res 75 --trials 8 --timeout 20 --final-examples 40
S layer_norm fp32 2048x4096+res 75 --trials 8 --timeout 20 --final-examples 40
ship group_norm layer_norm_backward rms_norm_backward layer_norm
stage verify 90 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 20
pack
