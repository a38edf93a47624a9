"""The shipped attention forward (`flash_attn.launch`), or with --backward its backward
(`flash_attn_backward.launch`), on every prefill preset with a handful of tile configs near the shipped ones,
same run, same inputs: which buckets would a search with these configs as warm starts improve? No verification
here (a search verifies whatever it keeps): forward outputs are checked against sdpa's, backward gradients
against those of the first config.

    python benchmarks/attention_config_sweep.py --dtype bf16 [--backward] --out results/attention-config-sweep-GPU-DATE

Times are CUDA-graph medians (`bench.kernel_ms`, L2 cleared before each replay).
"""

from __future__ import annotations

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
import argparse
import importlib
import json

import torch

from autotune import gpu
from autotune.measure import bench
from autotune.measure import report
from autotune.kernels.attention import problems as problems_
from autotune.kernels.attention import flash_attn_backward
from autotune.spec import dtype_from_name, shape_label

flash_attn = importlib.import_module("autotune.kernels.attention.flash_attn")  # the package's name is the function

TILES = [dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2), dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3),
         dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2), dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
         dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3), dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=2)]
BASE = {"KV_SPLITS": 1, "gqa": "per_head", "kv_load": "descriptor", "mask": "edges", "p": "rounded"}
"""The rest of every H100 prefill row's config."""
BACKWARD_TILES = [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2), dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
                  dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=2), dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2),
                  dict(BLOCK_M=32, BLOCK_N=128, num_warps=4, num_stages=2), dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2),
                  dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=2)]
BACKWARD_BASE = {"delta": "recomputed", "ds": "split", "dq": "separate"}
"""The rest of every H100 prefill backward row's config: the variants the gate keeps (see flash_attn_backward)."""


def run(dtype_name: str, backward: bool = False) -> list[dict]:
    dtype = dtype_from_name(dtype_name)
    spec = autotune.get("flash_attn")
    rows = []
    for problem in problems_.PRESETS:
        if problem["nq"] == 1:
            continue  # decode: its rows split keys; not this sweep's question
        inputs = spec.make_inputs(problem, dtype, gpu.device(), 0)
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        causal, scale = inputs["is_causal"], inputs["scale"]
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        if backward:
            o, lse = flash_attn.forward(q, k, v, causal, scale)
            do = torch.randn(q.shape, generator=torch.Generator(device=q.device).manual_seed(1), device=q.device, dtype=dtype)
            ref = None
        label = shape_label(problem)
        for tiles in BACKWARD_TILES if backward else TILES:
            if backward:
                config = dict(BACKWARD_BASE, **tiles)
                out = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))

                def step(config=config, out=out):
                    flash_attn_backward.launch(do, q, k, v, o, lse, *out, causal, scale, config)
            else:
                config = dict(BASE, **tiles)
                out = (torch.full_like(q, float("nan")),)
                lse_out = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)

                def step(config=config, out=out, lse_out=lse_out):
                    flash_attn.launch(q, k, v, out[0], lse_out, causal, scale, config)

            try:
                step()
                if ref is None:
                    ref = tuple(t.clone() for t in out)  # the first config's gradients
                diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(out, (ref,) if not backward else ref))
                ms = bench.kernel_ms(step)
            except Exception as exc:  # a config that does not compile or fit costs its row only
                rows.append(dict(shape=label, config=config, error=f"{type(exc).__name__}: {str(exc)[:100]}"))
                print(f"{label} {tiles}: {type(exc).__name__}", flush=True)
                continue
            rows.append(dict(shape=label, config=config, ms=ms, max_diff=diff))
            print(f"{label} {json.dumps(tiles)}: {ms:.4f} ms, diff {diff:.3g}", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    from tabulate import tabulate

    first = {}
    for r in rows:  # the first config of each shape: the one every H100 row of that pass had
        first.setdefault(r["shape"], r.get("ms"))
    out = []
    for r in rows:
        c = r["config"]
        ms = r.get("ms")
        ratio = first[r["shape"]] / ms if ms and first[r["shape"]] else None
        out.append([r["shape"], f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']}", ms, ratio,
                    r.get("max_diff"), r.get("error", "")])
    return tabulate(out, headers=["shape", "tiles", "ms", "x first config", "max |diff| vs sdpa (fwd) or first config (bwd)", "error"],
                    tablefmt="github", floatfmt=".4g")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--backward", action="store_true", help="sweep the backward instead of the forward")
    parser.add_argument("--out", help="write OUT.md and OUT.json")
    args = parser.parse_args()
    env = report.environment()
    header = report.probe_header(env, args.dtype, "backward" if args.backward else "forward")
    print(header, flush=True)
    rows = run(args.dtype, args.backward)
    text = header + "\n\n" + table(rows) + "\n"
    print(text)
    if args.out:
        report.save(args.out, {**env, "rows": rows}, text)


if __name__ == "__main__":
    main()
