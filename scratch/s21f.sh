# Off-bucket (issue 7), H100, bf16, after the new buckets and group_norm's distance: rms_norm_backward group_norm group_norm_backward
BUDGET=575; . benchmarks/device_calls.sh
OB() { local k=$1 secs=$2; shift 2; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob2-$k" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 --trials 10 --timeout 20 --final-examples 50 --out "/tmp/x/off-bucket2-$k"; }
OB rms_norm_backward 180 12288x2048+res 2048x3072+res
OB group_norm 180 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
OB group_norm_backward 180 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
pack
