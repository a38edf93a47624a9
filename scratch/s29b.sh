BUDGET=580; . benchmarks/device_calls.sh
stage probe 330 python3 benchmarks/split_tail_probe.py --waves
cat /tmp/x/probe.log
stage gputests 230 python3 -m pytest -m gpu -q tests/test_matmul.py -k "split_tail and (same_bits or bfloat16 or float16)" -p no:cacheprovider
tail -5 /tmp/x/gputests.log
pack
