# H200 call 6: flash_attn_backward's first H200 rows (bf16), as many presets as the time allows, then db verify.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) ;; *) echo "not an H200: stop"; nvidia-smi --query-gpu=name --format=csv,noheader; exit 0 ;; esac
GPU=H200 BUDGET=570 SHIPPED_START=scratch/h200-fa2.sqlite; . benchmarks/device_calls.sh
search_missing flash_attn_backward bf16 340 --trials 4 --timeout 30 --examples 4 --final-examples 20
ship flash_attn_backward
stage verify 190 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --unverified --examples 20
pack
