# Call D (H100): issue 3's rms_norm and group_norm goals against the copy rate, fresh: compare.py (tuned, default,
# eager, compile, and a device copy of the same bytes, one process) at the goal shapes, bf16.
BUDGET=300 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
stage compare 280 python3 benchmarks/compare.py --kernel rms_norm --kernel group_norm --kernel layer_norm --dtype bf16 --shape rms_norm=8192x4096+res --shape rms_norm=16384x8192+res --shape rms_norm=8192x4096 --shape group_norm=8x512x64x64,activation=silu --shape group_norm=16x320x64x64,activation=silu --shape layer_norm=8192x4096+res --shape layer_norm=16384x8192+res --out /tmp/x/compare-norms-bf16-H100-2026-11-26
pack
