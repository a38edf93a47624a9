# Off-bucket (issue 7), H100 bf16: one stage per shape (the script now saves after each shape).
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
nvidia-smi -q -d CLOCK,PERFORMANCE > /tmp/x/clocks-start-f.txt
OB() { local tag=$1 k=$2 secs=$3; shift 3; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob5-$tag" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 $EXTRA --out "/tmp/x/off-bucket5-$tag"; }
EXTRA="--trials 6 --timeout 60 --examples 3 --final-examples 10"
OB mlp2 mlp 100 4096x1024x2048x512,bias,gelu_tanh
OB lin2 linear 80 4096x2048x8192,bias,gelu_tanh
OB lin3 linear 80 4096x8192x2048,bias
EXTRA="--trials 10 --timeout 15 --final-examples 30"
OB gnb1 group_norm_backward 75 4x256x48x48,groups=32,activation=silu
OB gnb2 group_norm_backward 75 2x1280x16x16,groups=32,activation=silu
OB ln1 layer_norm 70 12288x2048+res
OB ln2 layer_norm 70 2048x3072+res
OB gn2 group_norm 60 2x1280x16x16,groups=32,activation=silu
nvidia-smi -q -d CLOCK,PERFORMANCE > /tmp/x/clocks-end-f.txt
grep -A3 "Clocks Event Reasons Counters" /tmp/x/clocks-end-f.txt
pack
