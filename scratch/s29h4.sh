# H200 call 4 (and 5): flash_attn's first H200 rows (bf16 forward; an H200 runs its default config, 3.8x slower than the
# tuned one on the H100): the presets without an H200 row, then ship and db verify. Stops on any other GPU.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) ;; *) echo "not an H200: stop"; nvidia-smi --query-gpu=name --format=csv,noheader; exit 0 ;; esac
GPU=H200 BUDGET=580 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
search_missing flash_attn bf16 400 --trials 6 --timeout 20 --examples 4 --final-examples 30
ship flash_attn
stage verify 140 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --unverified --examples 20
pack
