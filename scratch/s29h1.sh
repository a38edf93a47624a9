# H200 call 1: the matmul family's first H200 rows, bf16 (an H200 runs their default config until now): linear's three
# presets, then matmul's five; each study warm-starts from the H100's winners (measured here). Stops on any other GPU.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) ;; *) echo "not an H200: stop"; nvidia-smi --query-gpu=name --format=csv,noheader; exit 0 ;; esac
GPU=H200 BUDGET=575 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
search_missing linear bf16 240 --trials 5 --timeout 45 --examples 4 --final-examples 20
search_missing matmul bf16 290 --trials 5 --timeout 45 --examples 4 --final-examples 20
ship linear matmul
pack
