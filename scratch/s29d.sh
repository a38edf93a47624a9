BUDGET=400; . benchmarks/device_calls.sh
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv | tee -a /tmp/x/calls.log
stage gelu 150 python3 benchmarks/gelu_epilogue_probe.py --rounds 3
stage goal 200 python3 benchmarks/linear_goal_probe.py --rounds 3 --m-list 8064 8192
cat /tmp/x/gelu.log /tmp/x/goal.log
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv | tee -a /tmp/x/calls.log
pack
