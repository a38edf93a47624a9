# Off-bucket (issue 7), H100 bf16, fresh machine: the GEMM family (cheaper exact search) and layer_norm's re-run.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
nvidia-smi -q -d CLOCK,PERFORMANCE > /tmp/x/clocks-start-a.txt
OB() { local tag=$1 k=$2 secs=$3; shift 3; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob4-$tag" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 $EXTRA --out "/tmp/x/off-bucket4-$tag"; }
EXTRA="--trials 6 --timeout 60 --examples 3 --final-examples 10"
OB matmul matmul 160 3072x3072x3072
OB linear linear 150 6144x4096x11008,bias,gelu_tanh
OB mlp mlp 150 4096x2048x8192x2048,bias,gelu_tanh
EXTRA="--trials 10 --timeout 15 --final-examples 30"
OB layer_norm layer_norm 110 12288x2048+res 2048x3072+res
nvidia-smi -q -d CLOCK,PERFORMANCE > /tmp/x/clocks-end-a.txt
grep -A12 "Clocks Event Reasons\|Clocks Throttle" /tmp/x/clocks-end-a.txt | head -14
pack
