mkdir -p $OUT/h; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/h/p-rounded.txt
timeout 240 python3 scratch/p_rounded_decode_probe.py 12 2>&1 | grep -v Warning | tee -a $OUT/h/p-rounded.txt
