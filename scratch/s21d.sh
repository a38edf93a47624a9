# New buckets (H100, bf16): the n=2048 width of LLM norms (16384 tokens) and SD 1.5's 32x32 group norm (batch 2);
# each verified, shipped into the copy, then the off-bucket runs of layer_norm and rms_norm that they serve.
BUDGET=585; . benchmarks/device_calls.sh
S() { local k=$1 shape=$2 secs=$3; stage "s-$k" "$secs" at search "$k" --gpu H100 --dtype bf16 --shape "$shape" --trials 10 --timeout 25 --final-examples 50; }
S layer_norm 16384x2048+res 55
S rms_norm 16384x2048+res 55
S layer_norm_backward 16384x2048+res 60
S rms_norm_backward 16384x2048+res 60
S group_norm 2x640x32x32,groups=32,activation=silu 55
S group_norm_backward 2x640x32x32,groups=32,activation=silu 55
ship layer_norm rms_norm layer_norm_backward rms_norm_backward group_norm group_norm_backward
stage verify 100 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
OB() { local k=$1 secs=$2; shift 2; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob2-$k" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 --trials 10 --timeout 20 --final-examples 50 --out "/tmp/x/off-bucket2-$k"; }
OB layer_norm 100 12288x2048+res 2048x3072+res
OB rms_norm 100 12288x2048+res 2048x3072+res
pack
