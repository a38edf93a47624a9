# Call E (H100): float32 rows for the norm buckets that bf16 and fp16 have beyond the presets (16384x2048+res,
# 2048x4096+res), layer_norm's now searched under its error floor; db verify of the new rows; a same-run bench.
BUDGET=570 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
stage s-ln32 170 at search layer_norm --gpu H100 --dtype fp32 --shape 16384x2048+res --shape 2048x4096+res --trials 8 --timeout 45 --final-examples 40
stage s-rms32 150 at search rms_norm --gpu H100 --dtype fp32 --shape 16384x2048+res --shape 2048x4096+res --trials 8 --timeout 40 --final-examples 40
ship layer_norm rms_norm
stage verify 110 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 20
export AUTOTUNE_DB=/tmp/x/shipped.sqlite
stage bench 100 at bench layer_norm rms_norm --gpu H100 --dtype fp32 --shape layer_norm=16384x2048+res --shape layer_norm=2048x4096+res --shape rms_norm=16384x2048+res --shape rms_norm=2048x4096+res --graphs --out /tmp/x/bench-norms-fp32-n2048-H100-2026-11-26
python3 -m autotune query layer_norm --gpu H100 --dtype fp32 --db /tmp/x/shipped.sqlite > /tmp/x/query.txt 2>&1
python3 -m autotune query rms_norm --gpu H100 --dtype fp32 --db /tmp/x/shipped.sqlite >> /tmp/x/query.txt 2>&1
pack
