# Call D: a group_norm_backward bf16 row at 4x256x64x64 (bucket ng=128,cg=8,hw=4096), then the off-bucket shape
# 4x256x48x48 that the new 2x640x32x32 row served at 1.34x its exact config.
BUDGET=${BUDGET:-380} SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
export PYTHONFAULTHANDLER=1
S() { local k=$1 d=$2 shape=$3 secs=$4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" --trials 8 --timeout 20 --final-examples 40; }
OB() { local tag=$1 k=$2 secs=$3; shift 3; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob9-$tag" "$secs" timeout -s ABRT $((secs - 8)) python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 $EXTRA --out "/tmp/x/off-bucket9-$tag"; }
S group_norm_backward bf16 4x256x64x64,groups=32,activation=silu 100
ship group_norm_backward
EXTRA="--trials 10 --timeout 15 --final-examples 30"
OB gnb group_norm_backward 130 4x256x48x48,groups=32,activation=silu
stage verify 70 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 30
pack
