# Off-bucket (issue 7), H100 bf16: flash_attn_backward's causal D=128 shape; then fp16 rows of the new norm buckets.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
OB() { local tag=$1 k=$2 secs=$3; shift 3; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob4-$tag" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 $EXTRA --out "/tmp/x/off-bucket4-$tag"; }
EXTRA="--trials 6 --timeout 60 --examples 3 --final-examples 10"
OB fab2 flash_attn_backward 310 4x16x3072x128+causal
S() { local k=$1 d=$2 shape=$3 secs=$4; stage "s-$k-$d" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" --trials 8 --timeout 20 --final-examples 40; }
S layer_norm fp16 16384x2048+res 85
S rms_norm fp16 16384x2048+res 85
ship layer_norm rms_norm
stage verify 60 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
pack
