BUDGET=400; . benchmarks/device_calls.sh
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv | tee -a /tmp/x/calls.log
stage goal 300 python3 benchmarks/linear_goal_probe.py --rounds 3 --m-list 8064 8192
cat /tmp/x/goal.log
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv | tee -a /tmp/x/calls.log
pack
