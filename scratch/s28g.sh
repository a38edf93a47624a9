# Call G (H100): the GQA decode bucket (2x16/4x1:32768x128: 0.83x cuDNN, 65% of a same-size copy) re-searched in
# bf16 and fp16 with more trials and warm starts over more key splits, warps and wider key blocks; db verify; the
# decode probe again with the merged rows.
BUDGET=560 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
base='"BLOCK_M": 16, "gqa": "packed", "kv_load": "pointer", "mask": "every", "p": "split"'
ws=()
for c in '"KV_SPLITS": 64, "BLOCK_N": 64, "num_warps": 2, "num_stages": 2' '"KV_SPLITS": 128, "BLOCK_N": 64, "num_warps": 2, "num_stages": 2' \
         '"KV_SPLITS": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2' '"KV_SPLITS": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2' \
         '"KV_SPLITS": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3' '"KV_SPLITS": 32, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3' \
         '"KV_SPLITS": 64, "BLOCK_N": 64, "num_warps": 2, "num_stages": 3'; do ws+=(--warm-start "{$base, $c}"); done
stage s-gqa 330 at search flash_attn --gpu H100 --dtype bf16 --dtype fp16 --shape 2x16/4x1:32768x128 "${ws[@]}" --trials 28 --timeout 130 --examples 4 --final-examples 30
ship flash_attn
stage verify 80 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 20
AUTOTUNE_DB=/tmp/x/shipped.sqlite stage decode 80 python3 benchmarks/decode_host_probe.py
python3 -m autotune query flash_attn --gpu H100 --db /tmp/x/shipped.sqlite --format csv | grep "nk=32768" > /tmp/x/gqa-rows.csv
pack
