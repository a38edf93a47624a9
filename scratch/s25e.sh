# Call E: the matmul family's eager host path before (HEAD's autotune, scratch/old) and after (working tree);
# then the matmul family's tests on the GPU.
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
stage probe-before 120 env PYTHONPATH=/tmp/site:$PWD/scratch/old python3 benchmarks/gemm_host_probe.py --label "before (3b31d92)" --out /tmp/x/gemm-host-probe-before
stage probe-after 120 python3 benchmarks/gemm_host_probe.py --label "after (eager Functions for matmul and mlp, backward products launched directly)" --out /tmp/x/gemm-host-probe-after
stage gpu-tests 300 python3 -m pytest -q -x tests/test_linear_and_mlp.py tests/test_matmul.py -p no:cacheprovider
pack
