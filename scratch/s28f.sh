# Call F (H100): the decode presets against the memory's rate (issue 5's forward goal at decode), same run.
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/f/decode.txt
timeout 150 python3 benchmarks/decode_host_probe.py 2>&1 | tee -a $OUT/f/decode.txt
