# Call B (H100): layer_norm's gate with the bias floor: the failing row, the diag's problems, the H100 layer_norm
# rows re-verified, the float32 16384x8192+res bucket searched again, a same-run bench.
BUDGET=585 SHIPPED_START=scratch/shipped-27a.sqlite; . benchmarks/device_calls.sh
stage gputest 90 python3 -m pytest -q -m gpu tests/test_layer_norm.py -k "cancelling_row" -p no:cacheprovider
DIAG_NO_TIME=1 DIAG_VARIANTS="shipped single,looped 1024" stage diag 120 python3 scratch/ln_fp32_diag.py 150
grep -v "^  \|UserWarning\|var = rows" /tmp/x/diag.log | cut -c1-300
stage s-ln32 200 at search layer_norm --gpu H100 --dtype fp32 --shape 16384x8192+res --trials 8 --timeout 60 --final-examples 40
ship layer_norm
stage verify 240 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --kernel layer_norm --examples 20
export AUTOTUNE_DB=/tmp/x/shipped.sqlite
stage bench 90 at bench layer_norm rms_norm --gpu H100 --dtype fp32 --shape layer_norm=16384x8192+res --shape rms_norm=16384x8192+res --graphs --out /tmp/x/bench-norms-fp32-H100-16384
pack
