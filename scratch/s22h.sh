# Off-bucket (issue 7), H100 bf16, ratios of GPU times (CUDA graph): the shapes whose calls are host-bound.
BUDGET=268 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
OB() { local tag=$1 k=$2 secs=$3; shift 3; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob6-$tag" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 $EXTRA --out "/tmp/x/off-bucket6-$tag"; }
EXTRA="--trials 10 --timeout 15 --final-examples 30"
OB gnb2 group_norm_backward 75 2x1280x16x16,groups=32,activation=silu
OB ln2 layer_norm 65 2048x3072+res
EXTRA="--trials 6 --timeout 60 --examples 3 --final-examples 10"
OB mlp2 mlp 70 4096x1024x2048x512,bias,gelu_tanh
EXTRA="--trials 10 --timeout 15 --final-examples 30"
OB gn2 group_norm 55 2x1280x16x16,groups=32,activation=silu
pack
