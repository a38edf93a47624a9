# Off-bucket (issue 7), H100 bf16: group_norm and its backward re-run, flash_attn_backward (cheaper exact search).
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
nvidia-smi -q -d CLOCK,PERFORMANCE > /tmp/x/clocks-start-b.txt
OB() { local tag=$1 k=$2 secs=$3; shift 3; local a=(); for s in "$@"; do a+=(--shape "$k=$s"); done; stage "ob4-$tag" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" "${a[@]}" --dtype bf16 $EXTRA --out "/tmp/x/off-bucket4-$tag"; }
EXTRA="--trials 10 --timeout 15 --final-examples 30"
OB gnb group_norm_backward 115 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
OB gn group_norm 105 4x256x48x48,groups=32,activation=silu 2x1280x16x16,groups=32,activation=silu
EXTRA="--trials 6 --timeout 60 --examples 3 --final-examples 10"
OB fab1 flash_attn_backward 310 8x16x1536x64
nvidia-smi -q -d CLOCK,PERFORMANCE > /tmp/x/clocks-end-b.txt
grep -A12 "Clocks Event Reasons\|Clocks Throttle" /tmp/x/clocks-end-b.txt | head -14
pack
