"""Issue 4's linear goal beside what bounds it (GPU): linear + bias + gelu_tanh, bf16, M=8192, K=4096, N=16384, in one
group of calls timed with `report.time_balanced` (each call timed in order, then in reverse, do_bench medians
averaged), the group repeated --rounds times on the same random inputs:

- tuned: the public `linear` with its shipped config (bias + gelu_tanh fused in the epilogue);
- tuned, bias only: the same kernel and config without the activation;
- torch eager: F.linear (cuBLASLt with its bias epilogue), then F.gelu(approximate="tanh");
- torch, bias only: F.linear alone;
- torch gelu alone: F.gelu(approximate="tanh") on a stored product;
- torch.compile of the eager function;
- copy: a device copy of the output's bytes.

With --m-list, also tuned against eager at other M (8064: 31 whole waves of 128x256 tiles on 132 SMs, 8192: 31 and 4
tiles). The goal (>= 1.1x eager) asks the fused kernel to take eager / 1.1; the report prints that time against
each of the others.

    python benchmarks/linear_goal_probe.py --rounds 3 --m-list 8064 > results/linear-goal-GPU-DATE.txt
"""

from __future__ import annotations

import argparse
import functools
import statistics

import torch
import torch.nn.functional as F

from autotune import gpu
from autotune.measure import report
from autotune.kernels import linear

K, N = 4096, 16384
GOAL = 1.1


def calls(m: int, full: bool) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen) / K**0.5
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=gen)

    def eager():
        return F.gelu(F.linear(x, w, b), approximate="tanh")

    out = {"tuned": functools.partial(linear, x, w, b, activation="gelu_tanh"), "torch eager": eager}
    if full:
        z = F.linear(x, w, b)
        y = torch.empty_like(z)
        out.update({
            "tuned, bias only": functools.partial(linear, x, w, b),
            "torch, bias only": functools.partial(F.linear, x, w, b),
            "torch gelu alone": functools.partial(F.gelu, z, approximate="tanh"),
            "torch.compile": torch.compile(eager),
            "copy of the output": functools.partial(y.copy_, z),
        })
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="how many times the group is timed")
    parser.add_argument("--m-list", type=int, nargs="*", default=[], help="other M to time tuned against eager at")
    args = parser.parse_args()
    info = gpu.current_gpu()
    print(f"{info.device_name}, torch {torch.__version__}, Triton {__import__('triton').__version__}")
    flops = 2.0 * 8192 * K * N
    group = calls(8192, full=True)
    times: dict[str, list[float]] = {name: [] for name in group}
    for r in range(args.rounds):
        result = report.time_balanced(group, graphs=False)
        for name, value in result.items():
            if isinstance(value, Exception):
                raise value
            times[name].append(value[0])
        goal = times["torch eager"][-1] / GOAL
        print(f"round {r + 1}: eager / {GOAL} = {goal:.4f} ms; tuned {times['tuned'][-1]:.4f} ms = "
              f"{times['torch eager'][-1] / times['tuned'][-1]:.3f}x eager; torch bias only {times['torch, bias only'][-1]:.4f} ms",
              flush=True)
    print(f"\n8192x{K}x{N}, bf16, bias, gelu_tanh: medians of {args.rounds} rounds (each the mean of an in-order and a reversed do_bench median)")
    goal = statistics.median(times["torch eager"]) / GOAL
    print(f"{'call':<22} {'ms':>8} {'TFLOP/s':>8} {'rounds':>26}  goal time / this")
    for name, values in times.items():
        ms = statistics.median(values)
        rate = f"{flops / ms / 1e9:8.0f}" if "gelu alone" not in name and "copy" not in name else f"{'':>8}"
        spread = ", ".join(f"{v:.4f}" for v in values)
        print(f"{name:<22} {ms:8.4f} {rate} {spread:>26}  {goal / ms:.3f}")
    for m in args.m_list:
        result = report.time_balanced(calls(m, full=False), graphs=False)
        tuned, eager = result["tuned"][0], result["torch eager"][0]
        print(f"M={m}: tuned {tuned:.4f} ms, eager {eager:.4f} ms, {eager / tuned:.3f}x eager", flush=True)


if __name__ == "__main__":
    main()
