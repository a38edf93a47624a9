# H200 call 3: the matmul family's fp16 rows on the H200 (warm starts: the bf16 H200 rows of calls 1-2 and the H100's),
# db verify, same-run bench in fp16. Stops on any other GPU.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) ;; *) echo "not an H200: stop"; nvidia-smi --query-gpu=name --format=csv,noheader; exit 0 ;; esac
GPU=H200 BUDGET=580 SHIPPED_START=scratch/h200-shipped.sqlite; . benchmarks/device_calls.sh
search_missing linear fp16 150 --trials 4 --timeout 45 --examples 4 --final-examples 20
search_missing matmul fp16 170 --trials 4 --timeout 45 --examples 4 --final-examples 20
ship linear matmul
search_missing mlp fp16 80 --trials 3 --timeout 45 --examples 4 --final-examples 20
ship mlp
stage verify 120 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --unverified --examples 20
export AUTOTUNE_DB=/tmp/x/shipped.sqlite
stage bench 60 at bench matmul linear mlp --gpu H200 --dtype fp16 --out /tmp/x/bench-matmul-family-fp16-H200-2026-11-26
pack
