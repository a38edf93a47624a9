# Call A (H100): the twenty-seventh session's layer_norm gate change, shown again on the GPU (its call-B logs were
# lost with its machine): the GPU tests, the diag's problems under the floor, the three float32 layer_norm rows
# re-verified on a fresh seed, a same-run bench of the float32 norms; then the launch-path and decode host probes.
BUDGET=560 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
python3 -c "import hypothesis, optuna; print('hypothesis', hypothesis.__version__, 'optuna', optuna.__version__)" | tee -a /tmp/x/calls.log
stage gputest 150 python3 -m pytest -q -m gpu tests/test_layer_norm.py tests/test_rows_say_how_they_were_timed.py -p no:cacheprovider
DIAG_NO_TIME=1 DIAG_VARIANTS="shipped single,looped 1024" stage diag 130 python3 scratch/ln_fp32_diag.py 150
grep -v "^  \|UserWarning\|var = rows" /tmp/x/diag.log | cut -c1-300
python3 - <<'PY'
import shutil, sqlite3
shutil.copy("autotune/db/shipped.sqlite", "/tmp/x/ln32.sqlite")
c = sqlite3.connect("/tmp/x/ln32.sqlite")
c.execute("DELETE FROM best_configs WHERE NOT (kernel = 'layer_norm' AND dtype = 'fp32' AND gpu = 'H100')")
c.commit(); print("rows kept", c.execute("SELECT count(*) FROM best_configs").fetchone())
PY
stage verify-ln32 120 at db verify --gpu H100 --db /tmp/x/ln32.sqlite --kernel layer_norm --examples 20
stage bench 110 at bench layer_norm rms_norm --gpu H100 --dtype fp32 --shape layer_norm=16384x8192+res --shape layer_norm=8192x4096+res --shape rms_norm=16384x8192+res --graphs --out /tmp/x/bench-norms-fp32-H100-2026-11-26
stage launch 60 python3 scratch/launch_probe.py
stage decode 60 python3 scratch/decode_probe.py
pack
