# Call C (H200): the H200's first flash_attn rows (bf16 forward; until now an H200 call ran the default config, 3.8x
# slower than the tuned one on the H100), head dim 128 and decode first; ship, db verify, and a same-run comparison
# against sdpa's backends at the head dim 128 goal shapes.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) ;; *) echo "not an H200: stop"; exit 0 ;; esac
GPU=H200 BUDGET=575 SHIPPED_START=autotune/db/shipped.sqlite; . benchmarks/device_calls.sh
D128="16x16x1024x128 8x16x2048x128 4x16x4096x128 2x16x8192x128 1x16x16384x128 16x16x1024x128+causal 8x16x2048x128+causal 4x16x4096x128+causal 2x16x8192x128+causal 1x16x16384x128+causal 16x16x1:4096x128 2x16/4x1:32768x128"
D64="16x16x1024x64 8x16x2048x64 4x16x4096x64 2x16x8192x64 1x16x16384x64 16x16x1024x64+causal 8x16x2048x64+causal 4x16x4096x64+causal 2x16x8192x64+causal 1x16x16384x64+causal"
args=(); for s in $D128 $D64; do args+=(--shape "$s"); done
stage s-fa-bf16 330 at search flash_attn --gpu H200 --dtype bf16 "${args[@]}" --trials 6 --timeout 20 --examples 4 --final-examples 30
ship flash_attn
stage verify 110 at db verify --gpu H200 --db /tmp/x/shipped.sqlite --unverified --examples 20
export AUTOTUNE_DB=/tmp/x/shipped.sqlite
stage compare 90 python3 benchmarks/compare_attention.py --dtype bf16 --shape 4x16x4096x128 --shape 4x16x4096x128+causal --shape 16x16x1024x128 --shape 1x16x16384x128 --shape 2x16/4x1:32768x128 --out /tmp/x/compare-attention-bf16-H200-2026-11-26
pack
