# Call 2: attention config sweep (bf16, fp16); fp16 rows of two norm buckets missing them.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
stage sweep-bf16 170 python3 benchmarks/attention_config_sweep.py --dtype bf16 --out /tmp/x/attention-config-sweep-bf16
stage sweep-fp16 150 python3 benchmarks/attention_config_sweep.py --dtype fp16 --out /tmp/x/attention-config-sweep-fp16
S group_norm fp16 2x640x32x32,groups=32,activation=silu 125 --trials 8 --timeout 20 --final-examples 40
S layer_norm_backward fp16 16384x2048+res 125 --trials 8 --timeout 20 --final-examples 40
ship group_norm layer_norm_backward
pack
