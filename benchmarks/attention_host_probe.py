"""Is attention's forward + backward limited by the GPU or by the host at short sequences? `flash_attn` and sdpa's
flash backend, forward and forward + backward (`torch.autograd.grad`), each timed three ways in one run:

- do_bench: `autotune.bench.time_ms` (L2 cleared before each call), what `compare_attention.py` reports;
- graph: replayed from a CUDA graph (`autotune.bench.graph_ms`): the GPU's time alone;
- host: the host's time per call, 100 calls queued without a sync (Python, autograd, Triton's launcher).

Where host exceeds graph, the call is host-bound and do_bench times the host.

    python benchmarks/attention_host_probe.py --out results/attention-host-probe-GPU-DATE.md
"""

from __future__ import annotations

import argparse
import time

import tabulate
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from autotune.measure import bench
from autotune.measure import report
from autotune.kernels import flash_attn

HOST_CALLS = 100
PROBLEMS = [(16, 16, 1024, 64, False), (16, 16, 1024, 64, True), (4, 16, 4096, 128, False)]


def host_ms(fn) -> float:
    fn()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(HOST_CALLS):
        fn()
    host = (time.perf_counter() - started) * 1000 / HOST_CALLS
    torch.cuda.synchronize()
    return host


def run(dtype: torch.dtype) -> list[list]:
    rows = []
    for batch, heads, n, d, causal in PROBLEMS:
        shape = f"{batch}x{heads}x{n}x{d}" + ("+causal" if causal else "")
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn((batch, heads, n, d), generator=gen, device="cuda", dtype=dtype) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))

        def sdpa(q, k, v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def ours(q, k, v):
            return flash_attn(q, k, v, is_causal=causal)

        for name, fn in (("flash_attn", ours), ("sdpa-flash", sdpa)):
            def fwd(fn=fn):
                with torch.no_grad():
                    fn(q, k, v)

            def fwd_bwd(fn=fn):
                torch.autograd.grad(fn(q, k, v), (q, k, v), do)

            for label, step in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                step()
                do_bench = bench.time_ms(step, warmup_ms=50, rep_ms=300)
                graph = bench.graph_ms(step, warmup_ms=50, rep_ms=300)
                host = host_ms(step)
                rows.append([shape, name, label, do_bench, graph, host,
                             "host" if graph is not None and host > graph else "GPU"])
                print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write OUT.md")
    args = parser.parse_args()
    header = report.probe_header(report.environment(), "bf16")
    rows = run(torch.bfloat16)
    text = header + "\n\n" + tabulate.tabulate(
        rows, headers=["shape", "impl", "pass", "do_bench ms", "graph ms", "host ms per call", "bound by"],
        tablefmt="github", floatfmt=".4g") + "\n"
    print(text)
    if args.out:
        with open(args.out + ".md", "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
