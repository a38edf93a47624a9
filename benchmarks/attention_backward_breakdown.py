"""Where the attention backward's time goes, by variant: the tuned backward (`flash_attn_backward.launch`)
with each combination of its three accuracy/speed choices, beside sdpa's flash and cuDNN backwards, same run,
same inputs.

- `delta`: "recomputed" (a query-side pass of two more products, Q K^T and dO V^T, per block pair) or
  "output" (rowsum(dO * O), one cheap pass; FlashAttention's way).
- `ds`: "split" (dS's rounding remainder as a second half operand: one more product for dK and one for dQ)
  or "rounded" (FlashAttention's way).
- `dq`: "separate" (a query-side kernel: Q K^T, dO V^T and dS K again) or "atomic" (added from the key-side
  kernel).

Counted in products of an Nq x Nk x D block pair: FlashAttention-2 does 5 (atomic dQ) or 7 (separate); the
shipped rows (recomputed, split, separate) do 11. Every H100 row uses them because the gate rejects the others
(benchmarks/NOTES.md: "delta: output fails the gate", and the dS rounding failure).

    python benchmarks/attention_backward_breakdown.py --out results/attention-backward-breakdown-GPU-DATE.md

Times are CUDA-graph medians (`bench.kernel_ms`, L2 cleared before each replay). sdpa's backward is its
forward + backward less its forward, each timed with `bench.time_ms`.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from autotune.measure import bench
from autotune.measure import report
from autotune.kernels.attention import flash_attn_backward

flash_attn = importlib.import_module("autotune.kernels.attention.flash_attn")  # the package's name is the function

PROBLEMS = [(4, 16, 4096, 128, False), (4, 16, 4096, 128, True)]
TILES = [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2), dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2)]
CHOICES = {"delta": ("recomputed", "output"), "ds": ("split", "rounded"), "dq": ("separate", "atomic")}
PRODUCTS = {("recomputed", "split", "separate"): 11, ("recomputed", "split", "atomic"): 9,
            ("recomputed", "rounded", "separate"): 9, ("recomputed", "rounded", "atomic"): 7,
            ("output", "split", "separate"): 9, ("output", "split", "atomic"): 7,
            ("output", "rounded", "separate"): 7, ("output", "rounded", "atomic"): 5}
"""Block-pair products of each (delta, ds, dq): the key-side kernel's 4 (+1 split dK, +1 dQ and +1 split dQ when
atomic), the query-side dQ kernel's 3 (+1 split), the delta pass's 2."""


def run(problems, dtype: torch.dtype) -> list[dict]:
    rows = []
    for batch, heads, n, d, causal in problems:
        shape = f"{batch}x{heads}x{n}x{d}" + ("+causal" if causal else "")
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn((batch, heads, n, d), generator=gen, device="cuda", dtype=dtype) for _ in range(4))
        scale = 1 / math.sqrt(d)
        # One product pass: 2 * B * H * Nq * Nk * D flops, half when causal.
        pass_flops = 2 * batch * heads * n * n * d * (0.5 if causal else 1.0)
        o = torch.empty_like(q)
        lse = torch.empty((batch, heads, n), device="cuda", dtype=torch.float32)
        flash_attn.launch(q, k, v, o, lse, causal, scale, dict(flash_attn.FORWARD_SPACE.default) | {
            "BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "kv_load": "descriptor", "p": "rounded"})
        grads = [torch.empty_like(t) for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
            torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(do)
            ref = (qg.grad, kg.grad, vg.grad)
        for backend, label in ((SDPBackend.FLASH_ATTENTION, "sdpa-flash"), (SDPBackend.CUDNN_ATTENTION, "sdpa-cudnn")):
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

            def fwd(backend=backend):
                with sdpa_kernel(backend), torch.no_grad():
                    torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

            def fwd_bwd(backend=backend):
                with sdpa_kernel(backend):
                    out = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                torch.autograd.grad(out, (qg, kg, vg), do)

            fwd_bwd()
            ms = bench.time_ms(fwd_bwd, warmup_ms=50, rep_ms=300) - bench.time_ms(fwd, warmup_ms=50, rep_ms=300)
            rows.append(dict(shape=shape, impl=label, ms=ms))
            print(f"{shape} {label}: backward {ms:.3f} ms", flush=True)
        for tiles, choice in itertools.product(TILES, itertools.product(*CHOICES.values())):
            config = dict(tiles, **dict(zip(CHOICES, choice)))

            def step(config=config):
                flash_attn_backward.launch(do, q, k, v, o, lse, *grads, causal, scale, config)

            try:
                step()
                torch.cuda.synchronize()
                diff = max(float((g.float() - r.float()).abs().max()) for g, r in zip(grads, ref))
                ms = bench.kernel_ms(step)
            except Exception as exc:  # a config that does not compile or run costs its row only
                rows.append(dict(shape=shape, impl="flash_attn_backward", config=config, error=f"{type(exc).__name__}: {str(exc)[:120]}"))
                print(f"{shape} {json.dumps(config)}: {type(exc).__name__}", flush=True)
                continue
            products = PRODUCTS[choice]
            rows.append(dict(shape=shape, impl="flash_attn_backward", config=config, ms=ms, products=products,
                             product_tflops=products * pass_flops / ms / 1e9, max_diff_vs_sdpa_flash=diff))
            print(f"{shape} {json.dumps(config)}: {ms:.3f} ms, {products} products at "
                  f"{products * pass_flops / ms / 1e9:.0f} TFLOP/s, max diff vs sdpa-flash {diff:.3g}", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    from tabulate import tabulate

    out = []
    for r in rows:
        c = r.get("config")
        tiles = "" if c is None else f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']}"
        choice = "" if c is None else f"{c['delta']}, {c['ds']}, {c['dq']}"
        out.append([r["shape"], r["impl"], tiles, choice, r.get("ms"), r.get("products"), r.get("product_tflops"),
                    r.get("max_diff_vs_sdpa_flash"), r.get("error", "")])
    return tabulate(out, headers=["shape", "impl", "tiles", "delta, ds, dq", "backward ms", "products", "product TFLOP/s",
                                  "max diff vs sdpa-flash", "error"], tablefmt="github", floatfmt=".4g")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write OUT.md and OUT.json")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = parser.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    env = report.environment()
    header = report.probe_header(env, args.dtype)
    print(header, flush=True)
    rows = run(PROBLEMS, dtype)
    text = header + "\n\n" + table(rows) + "\n"
    print(text)
    if args.out:
        report.save(args.out, {**env, "rows": rows}, text)


if __name__ == "__main__":
    main()
