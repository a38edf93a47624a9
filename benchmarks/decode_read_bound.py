"""What bounds flash_attn's GQA decode step (2x16/4x1:32768x128: one query per head, 16 query heads sharing 4 K/V
heads, a 32768-key cache): `_read_kv` only reads K and V over the key-split grid the decode kernel uses (a program per
(batch, K/V head) and split, BLOCK_N keys a step) and sums them; beside it a device copy of K and V, sdpa's cuDNN and
flash backends, and flash_attn's forward at key-split configs with the splits merged by a second kernel
(combine="kernel") and by the program that finishes its tile last (combine="last_split"), bf16 and fp16, CUDA-graph GPU
time with the L2 cleared before each replay (`autotune.measure.bench.graph_ms`), in one process.

    python benchmarks/decode_read_bound.py --check     (under the Triton interpreter: _read_kv sums what it reads)
    python benchmarks/decode_read_bound.py --out benchmarks/results/H100/decode-read-bound       (on a GPU)
    python benchmarks/decode_read_bound.py --render OUT.json    (OUT.md again from a run's JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if "--check" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton
import triton.language as tl
from tabulate import tabulate

SHAPE = (2, 16, 4, 32768, 128)
"""(batch, query heads, K/V heads, keys, head dim): the decode preset 2x16/4x1:32768x128."""
READ_GRID = [(splits, block_n, stages) for splits in (8, 16, 32) for block_n in (64, 128) for stages in (2, 3, 4)]
OURS = [(8, 128, 3, "pointer"), (16, 64, 3, "pointer"), (16, 128, 3, "pointer"), (16, 64, 4, "pointer"),
        (8, 64, 4, "descriptor"), (32, 64, 3, "pointer")]  # fmt: skip
"""(KV_SPLITS, BLOCK_N, num_stages, kv_load) of flash_attn's forward, each with both merges."""


@triton.jit
def _read_kv(k_ptr, v_ptr, out_ptr, nk, split_len, D: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (c, s): the sum over keys s*split_len.. of K and V rows of (batch, K/V head) c, into out[s, c]."""
    col = tl.program_id(0)
    lo = tl.program_id(1) * split_len
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    base = col.to(tl.int64) * nk * D
    acc = tl.zeros([BLOCK_N, D], tl.float32)
    for start in range(lo, lo + split_len, BLOCK_N):
        rows = (start + offs_n)[:, None] * D + offs_d[None, :]
        acc += tl.load(k_ptr + base + rows).to(tl.float32) + tl.load(v_ptr + base + rows).to(tl.float32)
    tl.store(out_ptr + (tl.program_id(1) * tl.num_programs(0) + col) * D + offs_d, tl.sum(acc, 0))


def read_kv(k: torch.Tensor, v: torch.Tensor, sums: torch.Tensor, splits: int, block_n: int, stages: int) -> None:
    """_read_kv over k, v (B, Hk, N, D) contiguous, N a multiple of splits * block_n, into sums (splits * B * Hk, D)."""
    columns, nk, d = k.shape[0] * k.shape[1], k.shape[2], k.shape[3]
    _read_kv[(columns, splits)](k, v, sums, nk, nk // splits, D=d, BLOCK_N=block_n, num_warps=4, num_stages=stages)


def check() -> None:
    """Under the interpreter: each program's sum is the sum of its keys' K and V rows."""
    k, v = torch.randn(2, 3, 256, 16), torch.randn(2, 3, 256, 16)
    sums = torch.full((4 * 6, 16), float("nan"))
    read_kv(k, v, sums, 4, 32, 1)
    want = (k + v).view(6, 4, 64, 16).sum(2).transpose(0, 1).reshape(24, 16)
    assert torch.allclose(sums, want, atol=1e-4), (sums - want).abs().max()
    print("ok")


def _config(splits: int, block_n: int, stages: int, load: str, combine: str) -> dict:
    return dict(BLOCK_M=16, BLOCK_N=block_n, KV_SPLITS=splits, gqa="packed", kv_load=load, mask="edges",
                num_stages=stages, num_warps=4, p="rounded", engine="triton", NUM_CONSUMERS=1, PINGPONG=False,
                CONSUMER_REGISTERS=232, combine=combine)  # fmt: skip


def measure() -> dict:
    """Every timing of the module docstring, keyed by dtype name, then by what was timed (ms; err: flash_attn's max
    abs error against float64 sdpa)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from autotune.kernels.attention import flash_attn as fa
    from autotune.measure.bench import graph_ms

    batch, heads, kv_heads, nk, d = SHAPE
    results = {}
    for dtype in (torch.bfloat16, torch.float16):
        torch.manual_seed(0)
        q = torch.randn(batch, heads, 1, d, device="cuda", dtype=dtype)
        k = torch.randn(batch, kv_heads, nk, d, device="cuda", dtype=dtype)
        v = torch.randn(batch, kv_heads, nk, d, device="cuda", dtype=dtype)
        scale = d**-0.5
        r = results[str(dtype).removeprefix("torch.")] = {}
        kv = torch.stack([k, v])
        out = torch.empty_like(kv)
        r["copy"] = graph_ms(lambda: out.copy_(kv))
        for splits, block_n, stages in READ_GRID:
            sums = torch.empty(splits * batch * kv_heads, d, device="cuda", dtype=torch.float32)
            r[f"read s{splits} n{block_n} st{stages}"] = graph_ms(
                lambda: read_kv(k, v, sums, splits, block_n, stages),
                rep_ms=100,  # noqa: B023 (timed here, now)
            )
        for peer, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):

            def sdpa(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)

            r[peer] = graph_ms(sdpa)
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=scale, enable_gqa=True)
        o = torch.empty_like(q)
        lse = torch.empty(batch, heads, 1, device="cuda", dtype=torch.float32)
        for splits, block_n, stages, load in OURS:
            for combine in ("kernel", "last_split"):
                c = _config(splits, block_n, stages, load, combine)
                fa.launch(q, k, v, o, lse, False, scale, c)
                torch.cuda.synchronize()
                label = f"s{splits} n{block_n} st{stages} {load[:4]} {combine}"
                r[f"err {label}"] = (o.double() - ref).abs().max().item()
                r[f"ours {label}"] = graph_ms(lambda c=c: fa.launch(q, k, v, o, lse, False, scale, c), rep_ms=100)
    return results


def markdown(run: dict) -> str:
    """The run as a page: per dtype, each timing with its rate (GB/s of K and V read once) and against cuDNN."""
    batch, heads, kv_heads, nk, d = SHAPE
    env = run["environment"]
    lines = [
        "# What bounds flash_attn's GQA decode step",
        "",
        f"GPU: {env['gpu']} ({env['device_name']}); torch {env['torch']}; triton {env['triton']}; "
        f"cuDNN {env['cudnn']}; {batch}x{heads}/{kv_heads}x1:{nk}x{d}; date {env['date']}",
        "",
        "ms: CUDA-graph GPU time, L2 cleared before each replay. GB/s: K and V's bytes (read once) per second. read: a "
        "kernel that only reads K and V over the decode's key-split grid (s splits, n keys a step, st stages) and sums "
        "them; copy: K and V copied on the device (read and written); ours: flash_attn's forward with those splits "
        "(packed GQA heads, P rounded), merged by a second kernel or by the program that finishes its tile last "
        "(err: max abs error against float64).",
    ]
    if run.get("measured_as"):
        lines += ["", run["measured_as"]]
    for dtype, r in run["results"].items():
        nbytes = 2 * batch * kv_heads * nk * d * torch.empty(0, dtype=getattr(torch, dtype)).element_size()
        rows = [
            [key, f"{ms:.5f}", f"{nbytes / ms / 1e6:.0f}", f"{r['cudnn'] / ms:.3f}", f"{r.get('err ' + key[5:], '')}"]
            for key, ms in r.items()
            if not key.startswith("err ")
        ]
        lines += ["", f"## {dtype}", "", tabulate(rows, ["measured", "ms", "GB/s", "cuDNN / it", "err"], "github")]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="check _read_kv under the Triton interpreter")
    parser.add_argument("--out", help="writes OUT.md and OUT.json (a GPU)")
    parser.add_argument("--render", help="writes the .md beside a run's JSON again")
    args = parser.parse_args()
    if args.check:
        return check()
    if args.render:
        run = json.loads(open(args.render).read())
        with open(args.render.removesuffix(".json") + ".md", "w") as f:
            f.write(markdown(run))
        return None
    if not args.out:
        parser.error("--out, --check or --render")
    from autotune.measure.environment import environment

    run = {"environment": environment(), "results": measure()}
    with open(args.out + ".json", "w") as f:
        json.dump(run, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(run))
    print(markdown(run))
    return None


if __name__ == "__main__":
    main()
