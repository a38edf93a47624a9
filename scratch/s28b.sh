# Call B (H100): the layer_norm gate probe (every variant, with and without the error floor), then the GPU tests
# call A's time limit cut: the bias-cancelling row and the search's graph timing, verbose.
BUDGET=400 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
stage probe 200 python3 benchmarks/layer_norm_gate_probe.py --count 150 --out /tmp/x/layer-norm-gate-probe-H100-2026-11-26
stage gputest 150 python3 -m pytest -v -m gpu tests/test_layer_norm.py tests/test_rows_say_how_they_were_timed.py -k "cancelling_row or graph_timing" -p no:cacheprovider
pack
