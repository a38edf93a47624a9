# Call F: the two fp16 rows call E's limits cut short.
BUDGET=420 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
S group_norm_backward fp16 4x256x64x64,groups=32,activation=silu 130 --trials 8 --timeout 20 --final-examples 40
S layer_norm fp16 2048x4096+res 170 --trials 8 --timeout 20 --final-examples 40
ship group_norm_backward layer_norm
stage verify 80 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
pack
