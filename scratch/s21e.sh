# Off-bucket (issue 7), H100, bf16, after the new buckets (in the package's shipped.sqlite) and group_norm's distance.
BUDGET=585; . benchmarks/device_calls.sh
OB() { local k=$1 secs=$2; shift 2; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob2-$k" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 --trials 10 --timeout 20 --final-examples 50 --out "/tmp/x/off-bucket2-$k"; }
OB group_norm_backward 110 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
OB group_norm 100 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
OB layer_norm_backward 60 12288x2048+res
OB rms_norm_backward 60 12288x2048+res
OBG() { local k=$1 secs=$2; shift 2; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob2-$k" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 --trials 6 --timeout 60 --examples 3 --final-examples 10 --out "/tmp/x/off-bucket2-$k"; }
OBG matmul 120 3072x3072x3072
OBG linear 100 6144x4096x11008,bias,gelu_tanh
pack
