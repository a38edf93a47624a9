# Call H (H200): same-run bench of the five rows call G shipped (tuned vs default, eager, torch.compile; graphs too).
GPU=H200 BUDGET=400 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
stage bench-half 150 at bench softmax rms_norm --gpu H200 --dtype fp16 --shape softmax=4096x1024 --shape rms_norm=8192x4096 --graphs --out /tmp/x/bench-h200-fp16
stage bench-fp32 200 at bench layer_norm rms_norm --gpu H200 --dtype fp32 --shape layer_norm=8192x4096 --shape layer_norm=8192x4096+res --shape rms_norm=8192x4096+res --graphs --out /tmp/x/bench-h200-fp32
pack
