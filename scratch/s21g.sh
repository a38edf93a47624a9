# New buckets (H100, bf16), the rest of them: LLM norms at n=2048 (16384 tokens), SD 1.5's 32x32 group norm (batch 2).
BUDGET=585 SHIPPED_START=scratch/shipped-d.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 shape=$2 secs=$3; stage "s-$k" "$secs" at search "$k" --gpu H100 --dtype bf16 --shape "$shape" --trials 8 --timeout 20 --final-examples 40; }
S layer_norm 16384x2048+res 85
S layer_norm_backward 16384x2048+res 95
S rms_norm_backward 16384x2048+res 95
S group_norm 2x640x32x32,groups=32,activation=silu 85
S group_norm_backward 2x640x32x32,groups=32,activation=silu 95
ship layer_norm layer_norm_backward rms_norm_backward group_norm group_norm_backward
stage verify 110 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
pack
