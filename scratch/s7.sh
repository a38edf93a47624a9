# Call 7: backward config sweep (bf16, fp16) at the re-searched forward rows.
BUDGET=560 SHIPPED_START=${SHIPPED_START:-autotune/db/shipped.sqlite}; . benchmarks/device_calls.sh
stage sweep-bwd-bf16 270 python3 benchmarks/attention_config_sweep.py --backward --dtype bf16 --out /tmp/x/attention-config-sweep-backward-bf16
stage sweep-bwd-fp16 270 python3 benchmarks/attention_config_sweep.py --backward --dtype fp16 --out /tmp/x/attention-config-sweep-backward-fp16
pack
