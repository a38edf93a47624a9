"""What the fused gelu_tanh costs the GEMM's epilogue (GPU), and what a one-instruction tanh would save: linear +
bias at 8192x4096x16384 bf16 with the shipped config (tma_persistent 128x256x64), its epilogue as shipped (gelu_tanh as
z / (1 + exp(-2u)): an ex2 and a reciprocal on the special-function units per element), as 0.5 z (1 + tanh.approx(u))
(one special-function op; a copy of the GEMM module with that `activate`), and without an activation; with torch eager,
in one `report.time_balanced` group, --rounds times. Then each form's error against float64 on the first 512 rows:
overall, where -4 < z < -2 (the tail, where 1 + tanh(u) cancels), and where |y| > 0.5.

    python benchmarks/gelu_epilogue_probe.py > results/gelu-epilogue-GPU-DATE.txt
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from autotune import gpu
from autotune.measure import report
from autotune.kernels.gemm import gemm as _gemm

CONFIG = {"BLOCK_K": 64, "BLOCK_M": 128, "BLOCK_N": 256, "GROUP_M": 8, "SPLIT_K": 1, "num_stages": 3, "num_warps": 8,
          "variant": "tma_persistent"}
M, K, N = 8192, 4096, 16384


@triton.jit
def approximate_activate(z, ACTIVATION: tl.constexpr):
    """gelu_tanh (ACTIVATION 3) through PTX's tanh.approx.f32; anything else unchanged (this probe runs only those)."""
    if ACTIVATION == 3:
        u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [u], dtype=tl.float32, is_pure=True, pack=1)
        y = 0.5 * z * (1.0 + t)
    else:
        y = z
    return y


def approximate_gemm_module():
    """A second copy of autotune.kernels._gemm (its own JIT functions) whose epilogue calls approximate_activate."""
    spec = importlib.util.spec_from_file_location("_gemm_tanh_approx", _gemm.__file__)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.activate = approximate_activate
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{gpu.current_gpu().device_name}, torch {torch.__version__}, Triton {triton.__version__}; {M}x{K}x{N} bf16, {CONFIG}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen) / K**0.5
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=gen)
    a3, b3 = x[None], w.t()[None]

    def fused(module, activation: str):
        y = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)
        launch = module.plan(a3.shape, a3.stride(), b3.shape, b3.stride(), y.stride(), torch.bfloat16, CONFIG, bias=True,
                             activation=activation)

        def call():
            module.run(launch, a3, b3, y, bias=b)
            return y[0]

        return call

    calls = {"gelu_tanh as shipped": fused(_gemm, "gelu_tanh"),
             "gelu_tanh, tanh.approx": fused(approximate_gemm_module(), "gelu_tanh"),
             "bias only": fused(_gemm, "none"),
             "torch eager": lambda: F.gelu(F.linear(x, w, b), approximate="tanh")}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, value in report.time_balanced(calls, graphs=False).items():
            if isinstance(value, Exception):
                raise value
            times[name].append(value[0])
    eager = statistics.median(times["torch eager"])
    for name, values in times.items():
        print(f"{name:<24} {statistics.median(values):.4f} ms  rounds {', '.join(f'{v:.4f}' for v in values)}  "
              f"eager / this {eager / statistics.median(values):.3f}")
    z = x[:512].double() @ w.double().t() + b.double()
    want = 0.5 * z * (1 + torch.tanh(0.7978845608028654 * (z + 0.044715 * z**3)))
    for name in ("gelu_tanh as shipped", "gelu_tanh, tanh.approx"):
        err = (calls[name]()[:512].double() - want).abs()
        rel = err / want.abs().clamp_min(1e-30)
        tail = (z < -2) & (z > -4)
        print(f"{name}: largest error {err.max().item():.3e}; largest relative error where -4 < z < -2: "
              f"{rel[tail].max().item():.3e}, where |y| > 0.5: {rel[want.abs() > 0.5].max().item():.3e}")


if __name__ == "__main__":
    main()
