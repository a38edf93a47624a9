# Call F: the matmul family's eager host path, before (HEAD 3b31d92's autotune, scratch/old) and after (working
# tree), alternated twice in separate processes (this host's per-call times move by up to 2x between runs).
BUDGET=585 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
for i in 1 2; do
  stage probe-before-$i 100 env PYTHONPATH=/tmp/site:$PWD/scratch/old python3 benchmarks/gemm_host_probe.py --label "before (3b31d92), run $i" --out /tmp/x/gemm-host-probe-before-$i
  stage probe-after-$i 100 python3 benchmarks/gemm_host_probe.py --label "after (eager Functions for matmul and mlp, backward products launched directly), run $i" --out /tmp/x/gemm-host-probe-after-$i
done
pack
