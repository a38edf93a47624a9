# Off-bucket (issue 7), H100, bf16: attention's backward.
BUDGET=575; . benchmarks/device_calls.sh
OB() { local k=$1 secs=$2 t=${3:-20}; stage "ob-$k" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" --dtype bf16 --trials 10 --timeout "$t" --final-examples 50 --out "/tmp/x/off-bucket-$k"; }
[ -f /tmp/x/off-bucket-flash_attn.json ] || OB flash_attn 240 60
OB flash_attn_backward 330 90
pack
