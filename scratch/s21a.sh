# Off-bucket (issue 7), H100, bf16: the norms and their backwards, one stage (one output file) per kernel.
BUDGET=575; . benchmarks/device_calls.sh
OB() { local k=$1 secs=$2 t=${3:-20}; stage "ob-$k" "$secs" python3 benchmarks/off_bucket.py --kernel "$k" --dtype bf16 --trials 10 --timeout "$t" --final-examples 50 --out "/tmp/x/off-bucket-$k"; }
OB rms_norm 110
OB group_norm 70
OB layer_norm_backward 120
OB rms_norm_backward 120
OB group_norm_backward 80
OB matmul 150 30
pack
