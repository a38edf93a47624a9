# Call C (H200): the H200's missing float32 norm presets (layer_norm 16384x8192+res, rms_norm 16384x8192+res and
# 8192x4096) searched with layer_norm's new gate; its layer_norm rows re-verified under that gate; a same-run bench;
# then float32 vector_add and softmax presets with what time is left.
GPU=H200 BUDGET=585 SHIPPED_START=scratch/shipped-27b.sqlite; . benchmarks/device_calls.sh
search_missing layer_norm fp32 130 --trials 8 --timeout 40 --final-examples 40
search_missing rms_norm fp32 170 --trials 8 --timeout 35 --final-examples 40
ship layer_norm rms_norm
stage verify-ln 100 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --kernel layer_norm --examples 20
stage verify-new 40 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --unverified --examples 20
(export AUTOTUNE_DB=/tmp/x/shipped.sqlite; stage bench 70 at bench layer_norm rms_norm --gpu H200 --dtype fp32 --shape layer_norm=16384x8192+res --shape rms_norm=16384x8192+res --shape rms_norm=8192x4096 --graphs --out /tmp/x/bench-norms-fp32-H200-27)
search_missing vector_add fp32 40 --trials 6 --timeout 10 --final-examples 20
ship vector_add
stage verify-va 20 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --unverified --examples 20
pack
