# Call A (H100): layer_norm fp32 single-pass error by variant; launch-path host probe; the GPU timing test.
mkdir -p $OUT/a
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/a/versions.txt
python3 -c "import hypothesis, triton, torch; print('hypothesis', hypothesis.__version__, 'triton', triton.__version__, 'torch', torch.__version__)" | tee -a $OUT/a/versions.txt
t0=$(date +%s)
timeout 120 python3 scratch/launch_probe.py > $OUT/a/launch.log 2>&1; echo "launch rc=$? $(( $(date +%s) - t0 ))s"; cat $OUT/a/launch.log | tail -12
t0=$(date +%s)
timeout 300 python3 scratch/ln_fp32_diag.py 150 > $OUT/a/diag.log 2>&1; echo "diag rc=$? $(( $(date +%s) - t0 ))s"; grep -v "^  " $OUT/a/diag.log | cut -c1-400
t0=$(date +%s)
timeout 120 python3 -m pytest -q -m gpu tests/test_rows_say_how_they_were_timed.py -p no:cacheprovider > $OUT/a/pytest.log 2>&1; echo "pytest rc=$? $(( $(date +%s) - t0 ))s"; tail -3 $OUT/a/pytest.log
