# Call H: mlp fp16's small preset, then one same-run bench (with CUDA-graph times) of this session's new rows.
BUDGET=400 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
S mlp fp16 8192x1024x4096x256 90 --trials 6 --timeout 60 --examples 3 --final-examples 10
ship mlp
stage verify 60 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
stage bench 230 at bench group_norm_backward layer_norm rms_norm linear mlp --gpu H100 --dtype bf16 --graphs --out /tmp/x/bench-small-H100 \
  --shape group_norm_backward=2x640x32x32,groups=32,activation=silu --shape group_norm_backward=4x256x64x64,groups=32,activation=silu \
  --shape layer_norm=2048x4096+res --shape rms_norm=2048x4096+res --shape linear=8192x4096x256,bias --shape mlp=8192x1024x4096x256
pack
