BUDGET=570; . benchmarks/device_calls.sh
stage probe 300 python3 benchmarks/stream_k_probe.py --waves
cat /tmp/x/probe.log
stage gputests 250 python3 -m pytest -m gpu -q tests/test_matmul.py -k "stream_k" -p no:cacheprovider
pack
