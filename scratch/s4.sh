# Call 4: rms_norm_backward fp16 at 16384x2048+res; db verify of every unverified row of the shipped copy.
BUDGET=590 SHIPPED_START=${SHIPPED_START:-autotune/db/shipped.sqlite}; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
S rms_norm_backward fp16 16384x2048+res 100 --trials 8 --timeout 20 --final-examples 40
ship rms_norm_backward
stage verify 470 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 20
pack
