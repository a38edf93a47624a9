# Call G: linear fp16 at n=256 (mlp's second GEMM) by GPU time, and mlp's small preset again (two_pass runs
# linear's rows, one of which call E replaced).
BUDGET=430 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
S linear fp16 8192x4096x256,bias 175 --trials 16 --timeout 110 --examples 6 --final-examples 30
ship linear
S mlp bf16 8192x1024x4096x256 150 --trials 6 --timeout 60 --examples 3 --final-examples 10
ship mlp
stage verify 80 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
pack
