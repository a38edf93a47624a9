# Off-bucket (issue 7) re-run on a fresh machine: the shapes whose final timings in call H ran 1.4-3.4x above
# their own search's (layer_norm, group_norm and its backward).
BUDGET=330 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
OB() { local k=$1 secs=$2; shift 2; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob3-$k" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 --trials 10 --timeout 15 --final-examples 30 --out "/tmp/x/off-bucket3-$k"; }
OB group_norm_backward 110 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
OB layer_norm 100 12288x2048+res 2048x3072+res
OB group_norm 100 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
pack
