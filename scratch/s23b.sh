# Call B: the few-rows layer_norm bucket, the off-bucket shapes whose runtime row changed (call A), gnb fp16.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" --trials 8 --timeout 20 --final-examples 40; }
OB() { local tag=$1 k=$2 secs=$3; shift 3; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob7-$tag" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 $EXTRA --out "/tmp/x/off-bucket7-$tag"; }
S layer_norm bf16 2048x4096+res 115
ship layer_norm
EXTRA="--trials 10 --timeout 15 --final-examples 30"
OB ln layer_norm 75 2048x3072+res
OB rms rms_norm 70 2048x3072+res
OB gnb group_norm_backward 80 4x256x48x48,groups=32,activation=silu
S group_norm_backward fp16 2x640x32x32,groups=32,activation=silu 80
ship group_norm_backward
stage verify 70 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
pack
