# Call 8: small rows stored before the search timed by GPU time (NOTES item 4), re-searched with the stored row
# as a warm start (the store starts as the shipped file); db verify of what changes.
[ -f /tmp/old-tuned.sqlite ] || cp autotune/db/shipped.sqlite /tmp/old-tuned.sqlite
export AUTOTUNE_DB=/tmp/old-tuned.sqlite
BUDGET=470 SHIPPED_START=${SHIPPED_START:-autotune/db/shipped.sqlite}; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
S layer_norm bf16 8192x4096 80 --trials 8 --timeout 20 --final-examples 40
S rms_norm bf16 8192x4096 80 --trials 8 --timeout 20 --final-examples 40
S softmax bf16 4096x1024 70 --trials 8 --timeout 20 --final-examples 40
S softmax bf16 4096x4096 70 --trials 8 --timeout 20 --final-examples 40
ship layer_norm rms_norm softmax
stage verify 90 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 20
pack
