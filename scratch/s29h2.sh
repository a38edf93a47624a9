# H200 call 2: mlp's bf16 presets (two_pass runs linear's rows, shipped by call 1 into /tmp/x/shipped.sqlite when the
# machine stayed warm; SHIPPED_START otherwise), db verify of the new rows, and a same-run bench.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) ;; *) echo "not an H200: stop"; exit 0 ;; esac
GPU=H200 BUDGET=575 SHIPPED_START=${SHIPPED_START:-autotune/db/shipped.sqlite}; . benchmarks/device_calls.sh
search_missing linear bf16 200 --trials 5 --timeout 45 --examples 4 --final-examples 20
search_missing matmul bf16 200 --trials 5 --timeout 45 --examples 4 --final-examples 20
ship linear matmul
search_missing mlp bf16 150 --trials 4 --timeout 45 --examples 4 --final-examples 20
ship mlp
stage verify 200 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --unverified --examples 20
export AUTOTUNE_DB=/tmp/x/shipped.sqlite
stage bench 150 at bench matmul linear mlp --gpu H200 --dtype bf16 --out /tmp/x/bench-matmul-family-H200-2026-11-26
pack
