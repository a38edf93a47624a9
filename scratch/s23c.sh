# Call C: where kernel_ms's time goes; the off-bucket shapes of call B with room to finish (and phase times).
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
export PYTHONFAULTHANDLER=1
OB() { local tag=$1 k=$2 secs=$3; shift 3; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob8-$tag" "$secs" timeout -s ABRT $((secs - 8)) python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 $EXTRA --out "/tmp/x/off-bucket8-$tag"; }
stage kms 60 python3 scratch/kms23.py
EXTRA="--trials 10 --timeout 15 --final-examples 30"
OB ln layer_norm 170 2048x3072+res
OB rms rms_norm 150 2048x3072+res
OB gnb group_norm_backward 150 4x256x48x48,groups=32,activation=silu
pack
