"""Is a decode step of flash_attn bound by the host, and how near the memory's rate can it run (GPU)? Its public
no-grad call at the decode presets, 2x16/4x1:32768x128 bf16 (grouped heads, the key range split over programs) and
16x16x1:4096x128, beside sdpa's flash and cuDNN backends: host us per call (`hot_path.per_call_us`: 5 runs of 200
calls), CUDA-graph ms (the GPU's time), do_bench ms, and the GB/s of the graph time over the bytes a decode step
must move (q, k, v and the output once each), against a device copy of as many bytes and the datasheet peak; then
what 1.5x sdpa-flash (issue 5's forward goal) would need; then a cProfile of 300 public calls.

    python benchmarks/decode_host_probe.py > results/decode-host-GPU-DATE.txt
"""
import cProfile
import pstats
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from autotune import gpu
from autotune.measure import bench
from autotune.kernels import flash_attn
from hot_path import per_call_us

SHAPES = ((2, 16, 4, 32768), (16, 16, 16, 4096))  # batch, query heads, key/value heads, keys; one query, D 128


def main():
    info = gpu.current_gpu()
    print(f"{info.device_name}; torch {torch.__version__}; datasheet {info.peak_bandwidth_gbs:.0f} GB/s", flush=True)
    for b, h, hk, nk in SHAPES:
        q = torch.randn(b, h, 1, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, hk, nk, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        gqa = h != hk
        nbytes = 2 * q.numel() * q.element_size() + 2 * k.numel() * k.element_size()
        label = f"{b}x{h}/{hk}x1:{nk}x128"

        def sdpa(backend):
            def call():
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
            return call

        graphs = {}
        with torch.no_grad():
            for name, fn in (("flash_attn", lambda: flash_attn(q, k, v, enable_gqa=gqa)),
                             ("sdpa-flash", sdpa(SDPBackend.FLASH_ATTENTION)),
                             ("sdpa-cudnn", sdpa(SDPBackend.CUDNN_ATTENTION))):
                try:
                    fn()
                except RuntimeError as exc:  # a backend that does not take the shape
                    print(f"{label} {name}: not run ({str(exc).splitlines()[0][:120]})", flush=True)
                    continue
                graphs[name] = bench.graph_ms(fn)
                print(f"{label} {name}: host {per_call_us(fn, 200, 5):.1f} us, graph {graphs[name]:.4f} ms, "
                      f"do_bench {bench.time_ms(fn):.4f} ms, {nbytes / graphs[name] / 1e6:.0f} GB/s", flush=True)
            copy = bench.copy_bandwidth_gbs(nbytes)
            need = 1.5 * nbytes / graphs["sdpa-flash"] / 1e6
            print(f"{label}: {nbytes / 1e6:.1f} MB a step; a device copy of as many bytes {copy:.0f} GB/s; 1.5x sdpa-flash "
                  f"needs {need:.0f} GB/s = {100 * need / copy:.0f}% of that copy, {100 * need / info.peak_bandwidth_gbs:.0f}% "
                  "of the datasheet peak", flush=True)
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(300):
                flash_attn(q, k, v, enable_gqa=gqa)
            pr.disable()
            torch.cuda.synchronize()
            pstats.Stats(pr).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
