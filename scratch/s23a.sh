# Call A: the search's CUDA-graph timing on the GPU (tests, every kernel captured, small configs ranked three times
# each way), then the inflated group_norm_backward row re-searched and the few-rows layer_norm/rms_norm bucket.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" --trials 8 --timeout 20 --final-examples 40; }
stage tests 80 python3 -m pytest -q -p no:cacheprovider tests/test_search_ranks_configs_by_gpu_time.py
stage capture 140 python3 scratch/capture23.py
S group_norm_backward bf16 2x640x32x32,groups=32,activation=silu 90
S layer_norm bf16 2048x4096+res 75
S rms_norm bf16 2048x4096+res 75
ship layer_norm rms_norm group_norm_backward
stage verify 90 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
pack
