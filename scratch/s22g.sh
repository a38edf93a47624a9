# Off-bucket group_norm 2x1280x16x16 again; fp16 rows of the new norm buckets (the backwards, group_norm's), each db-verified.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
OB() { local tag=$1 k=$2 secs=$3; shift 3; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob5-$tag" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 $EXTRA --out "/tmp/x/off-bucket5-$tag"; }
EXTRA="--trials 10 --timeout 15 --final-examples 30"
OB gn2 group_norm 65 2x1280x16x16,groups=32,activation=silu
S() { local k=$1 d=$2 shape=$3 secs=$4; stage "s-$k-$d" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" --trials 8 --timeout 20 --final-examples 40; }
S layer_norm_backward fp16 16384x2048+res 95
S rms_norm_backward fp16 16384x2048+res 95
S group_norm fp16 2x640x32x32,groups=32,activation=silu 85
S group_norm_backward fp16 2x640x32x32,groups=32,activation=silu 95
ship layer_norm_backward rms_norm_backward group_norm group_norm_backward
stage verify 100 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
pack
