# Call D: layer_norm fp32 16384x8192+res searched again with its failing trials printed; the bf16 norms bench again.
BUDGET=585 SHIPPED_START=scratch/shipped-25c.sqlite; . benchmarks/device_calls.sh
S() { local k=$1 d=$2 shape=$3 secs=$4; shift 4; stage "s-$k-$d-$(date +%H%M%S)" "$secs" at search "$k" --gpu H100 --dtype "$d" --shape "$shape" "$@"; }
S layer_norm fp32 16384x8192+res 150 --trials 10 --timeout 40 --final-examples 40 \
  --warm-start '{"variant": "single", "BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1, "num_warps": 8, "num_stages": 1}' \
  --warm-start '{"variant": "single", "BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1, "num_warps": 16, "num_stages": 1}' \
  --warm-start '{"variant": "single", "BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1, "num_warps": 32, "num_stages": 1}'
python3 - <<'PY' | tee /tmp/x/trials-ln32.log
import sqlite3
c = sqlite3.connect("/tmp/tuned.sqlite")
for r in c.execute("select number, outcome, time_ms, config_json, reason, failing_example_json from trials where kernel='layer_norm' and dtype='fp32' order by id"):
    print(*[str(v)[:600] for v in r])
PY
ship layer_norm
stage verify 40 at db verify --gpu H100 --db /tmp/x/shipped.sqlite --unverified --examples 20
export AUTOTUNE_DB=/tmp/x/shipped.sqlite
stage bench 100 at bench layer_norm --gpu H100 --dtype bf16 --graphs --out /tmp/x/bench-layer_norm-bf16-H100-b
pack
