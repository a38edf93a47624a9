# Off-bucket (issue 7), H100, bf16, after the new buckets (in the package's shipped.sqlite) and group_norm's distance.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
OB() { local k=$1 secs=$2; shift 2; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob2-$k" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 --trials 10 --timeout 15 --final-examples 30 --out "/tmp/x/off-bucket2-$k"; }
OB group_norm_backward 120 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
OB layer_norm_backward 65 12288x2048+res
OB rms_norm_backward 65 12288x2048+res
OB rms_norm 110 12288x2048+res 2048x3072+res
OB layer_norm 110 12288x2048+res 2048x3072+res
OB group_norm 110 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
pack
