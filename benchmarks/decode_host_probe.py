"""Is a decode step of flash_attn bound by the host (GPU)? Its public no-grad call at the decode presets,
2x16/4x1:32768x128 bf16 (grouped heads, the key range split over programs) and 16x16x1:4096x128: host us per call
(200 queued, median of 5 blocks), CUDA-graph ms (the GPU's time) and do_bench ms, sdpa's flash backend beside
it; then a cProfile of 300 public calls.

    python benchmarks/decode_host_probe.py > results/decode-host-GPU-DATE.txt
"""
import cProfile
import pstats
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from autotune import bench
from autotune.kernels import flash_attn


def host_us(fn, calls=200, blocks=5):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def main():
    for b, h, hk, nk in ((2, 16, 4, 32768), (16, 16, 16, 4096)):
        q = torch.randn(b, h, 1, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, hk, nk, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        gqa = h != hk

        def ours():
            return flash_attn(q, k, v, enable_gqa=gqa)

        def sdpa():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

        with torch.no_grad():
            for name, fn in (("flash_attn", ours), ("sdpa-flash", sdpa)):
                print(f"{b}x{h}/{hk}x1:{nk}x128 {name}: host {host_us(fn):.1f} us, graph {bench.graph_ms(fn):.4f} ms, "
                      f"do_bench {bench.time_ms(fn):.4f} ms", flush=True)
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(300):
                ours()
            pr.disable()
            torch.cuda.synchronize()
            pstats.Stats(pr).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
