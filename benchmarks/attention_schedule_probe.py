"""Would a different schedule of the attention forward's key loop pay on this GPU? Same run, same inputs:
three stand-alone copies of the forward's math (non-causal, whole blocks, K/V through tensor descriptors) that
differ only in how a key block is scheduled, beside the shipped kernel (`flash_attn.launch` with its H100
config) and sdpa's flash and cuDNN backends.

- `base`: the shipped order: S = Q K^T, S scaled in full, row max, P = 2^(S - max), O += P V.
- `fma`: the scale folded into the row max and one fused multiply-add per score (Triton's tutorial order).
- `ahead`: `fma`, with the next block's Q K^T issued before this block's softmax, so the tensor cores can
  work on it while the softmax runs (FlashAttention-3's intra-warpgroup overlap, if the compiler keeps the
  product in flight).

    python benchmarks/attention_schedule_probe.py --out results/attention-schedule-probe-GPU-DATE.md

Times are CUDA-graph medians (`bench.kernel_ms`, L2 cleared before each replay); every output is compared with
sdpa's before timing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math

import torch
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

from autotune.measure import bench
from autotune.measure import report

flash_attn = importlib.import_module("autotune.kernels.attention.flash_attn")  # the package's name is the function

MODES = {"base": 0, "fma": 1, "ahead": 2}
CONFIGS = [dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2), dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3),
           dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2), dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=2),
           dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3), dict(BLOCK_M=256, BLOCK_N=64, num_warps=8, num_stages=2),
           dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)]
PROBLEMS = [(4, 16, 4096, 128), (16, 16, 1024, 128), (1, 16, 16384, 128), (4, 16, 4096, 64)]
SHIPPED = {"BLOCK_M": 128, "BLOCK_N": 64, "KV_SPLITS": 1, "gqa": "per_head", "kv_load": "descriptor", "mask": "edges",
           "num_stages": 2, "num_warps": 4, "p": "rounded"}
"""The config of every H100 prefill row of flash_attn (bf16 and fp16, D 64 and 128)."""


@triton.jit
def _softmax_pv(acc, m_i, l_i, s, v_desc, start, mult, FMA: tl.constexpr):
    """One key block's online-softmax update from its raw scores s (log2 units after * mult)."""
    if FMA:
        m_new = tl.maximum(m_i, tl.max(s, 1) * mult)  # mult > 0
        p = tl.math.exp2(s * mult - m_new[:, None])
    else:
        s = s * mult
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = v_desc.load([start, 0])
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def _probe_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n, mult, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, MODE: tl.constexpr):
    """Program (m, bh): rows m*BLOCK_M.. of head bh against all n keys; n a multiple of both blocks."""
    base = tl.program_id(1).to(tl.int64) * n * HEAD_DIM
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * HEAD_DIM + offs_d[None, :])
    k_desc = tl.make_tensor_descriptor(k_ptr + base, shape=[n, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr + base, shape=[n, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if MODE == 2:
        s = tl.dot(q, tl.trans(k_desc.load([0, 0])))
        for start in range(BLOCK_N, n, BLOCK_N):
            s_next = tl.dot(q, tl.trans(k_desc.load([start, 0])))
            acc, m_i, l_i = _softmax_pv(acc, m_i, l_i, s, v_desc, start - BLOCK_N, mult, True)
            s = s_next
        acc, m_i, l_i = _softmax_pv(acc, m_i, l_i, s, v_desc, n - BLOCK_N, mult, True)
    else:
        for start in range(0, n, BLOCK_N):
            s = tl.dot(q, tl.trans(k_desc.load([start, 0])))
            acc, m_i, l_i = _softmax_pv(acc, m_i, l_i, s, v_desc, start, mult, MODE == 1)
    o = acc / l_i[:, None]
    tl.store(o_ptr + base + rows[:, None] * HEAD_DIM + offs_d[None, :], o.to(o_ptr.dtype.element_ty))


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _probe(q, k, v, o, mode: str, config: dict) -> None:
    batch, heads, n, d = q.shape
    mult = (1 / math.sqrt(d)) * 1.4426950408889634  # scores in log2 units
    _probe_fwd_kernel[(n // config["BLOCK_M"], batch * heads)](
        q, k, v, o, n, mult, HEAD_DIM=d, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], MODE=MODES[mode],
        num_warps=config["num_warps"], num_stages=config["num_stages"])


def run(problems, configs, dtype: torch.dtype) -> list[dict]:
    triton.set_allocator(_scratch)
    rows = []
    for batch, heads, n, d in problems:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn((batch, heads, n, d), generator=gen, device="cuda", dtype=dtype) for _ in range(3))
        flops = 4 * batch * heads * n * n * d
        shape = f"{batch}x{heads}x{n}x{d}"
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)

        def record(name, config, fn, out=None):
            try:
                fn()
                torch.cuda.synchronize()
                err = None if out is None else float((out.float() - ref.float()).abs().max())
                ms = bench.kernel_ms(fn)
            except Exception as exc:  # a config that does not compile or run costs its row only
                rows.append(dict(shape=shape, impl=name, config=config, error=f"{type(exc).__name__}: {str(exc)[:120]}"))
                print(f"{shape} {name} {config}: {type(exc).__name__}", flush=True)
                return
            rows.append(dict(shape=shape, impl=name, config=config, ms=ms, tflops=flops / ms / 1e9, max_diff=err))
            print(f"{shape} {name:8} {json.dumps(config)}: {ms:.4f} ms {flops / ms / 1e9:.1f} TFLOP/s diff {err}", flush=True)

        for backend, label in ((SDPBackend.FLASH_ATTENTION, "sdpa-flash"), (SDPBackend.CUDNN_ATTENTION, "sdpa-cudnn")):
            def sdpa(backend=backend):
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
            record(label, None, sdpa)
        o = torch.empty_like(q)
        lse = torch.empty((batch, heads, n), device="cuda", dtype=torch.float32)
        record("shipped", SHIPPED, lambda: flash_attn.launch(q, k, v, o, lse, False, 1 / math.sqrt(d), SHIPPED), o)
        for config in configs:
            if config["BLOCK_M"] > n or config["BLOCK_N"] > n:
                continue
            for mode in MODES:
                o = torch.full_like(q, float("nan"))  # poisoned: a row the kernel misses shows
                record(mode, config, lambda mode=mode, config=config, o=o: _probe(q, k, v, o, mode, config), o)
    return rows


def table(rows: list[dict]) -> str:
    from tabulate import tabulate

    out = []
    for r in rows:
        c = r["config"]
        tile = "" if c is None else f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']}"
        out.append([r["shape"], r["impl"], tile, r.get("ms"), r.get("tflops"), r.get("max_diff"), r.get("error", "")])
    return tabulate(out, headers=["shape (BxHxNxD)", "impl", "tiles", "ms", "TFLOP/s", "max |diff| vs sdpa", "error"],
                    tablefmt="github", floatfmt=".4g")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write OUT.md and OUT.json")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = parser.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    env = report.environment()
    header = report.probe_header(env, args.dtype)
    print(header, flush=True)
    rows = run(PROBLEMS, CONFIGS, dtype)
    text = header + "\n\n" + table(rows) + "\n"
    print(text)
    if args.out:
        report.save(args.out, {**env, "rows": rows}, text)


if __name__ == "__main__":
    main()
