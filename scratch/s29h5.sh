# H200 call 5: flash_attn's remaining bf16 presets, db verify of the unverified H200 rows, a same-run comparison.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) ;; *) echo "not an H200: stop"; nvidia-smi --query-gpu=name --format=csv,noheader; exit 0 ;; esac
GPU=H200 BUDGET=480 SHIPPED_START=scratch/h200-fa.sqlite; . benchmarks/device_calls.sh
search_missing flash_attn bf16 120 --trials 6 --timeout 20 --examples 4 --final-examples 30
ship flash_attn
stage verify 180 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --unverified --examples 20
export AUTOTUNE_DB=/tmp/x/shipped.sqlite
stage compare 120 python3 benchmarks/compare_attention.py --dtype bf16 --shape 4x16x4096x128 --shape 4x16x4096x128+causal --shape 16x16x1024x128 --shape 1x16x16384x128 --shape 2x16/4x1:32768x128 --out /tmp/x/compare-attention-bf16-H200-2026-11-26
pack
