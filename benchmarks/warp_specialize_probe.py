"""Does Triton's warp specialization (`tl.range(..., warp_specialize=True)`) speed up this repo's GEMM and attention
forward on this GPU? Same run, same configs: the module's kernels against copies whose main loop is a
warp-specialized `tl.range` (the GEMM's K loop, or its persistent tile loop; attention's unmasked key loop).

    python benchmarks/warp_specialize_probe.py --out results/warp-specialize-probe-GPU-DATE.md

Each (part, loop, config) runs in its own process under --seconds: a warp-specialized kernel that hangs
(one did, on the H100 with Triton 3.6) costs its row, not the run. Rows give TFLOP/s and the largest
difference from the unchanged kernel's output (GEMM) or from sdpa's (attention), read before timing.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import pathlib
import subprocess
import sys

GEMM_CONFIGS = [
    {"variant": "tma", "BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 4, "num_warps": 8, "num_stages": 4, "SPLIT_K": 1},
    {"variant": "tma", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "SPLIT_K": 1},
    {"variant": "tma", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4, "SPLIT_K": 1},
    {"variant": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "SPLIT_K": 1},
]
GEMM_PROBLEMS = [(8192, 4096, 16384, "gelu_tanh"), (8192, 4096, 14336, "none")]
ATTENTION_CONFIGS = [dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2), dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=2),
                     dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3), dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
                     dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)]
ATTENTION_PROBLEMS = [(4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (1, 16, 16384, 128, False), (16, 16, 1024, 64, False)]
LOOPS = {  # part -> loop name -> (text in the module's source, its warp-specialized replacement)
    "gemm": {"base": None,
             "ws_k": ("    for k in range(k_lo, k_hi, BLOCK_K):\n        a = descriptor_block(",
                      "    for k in tl.range(k_lo, k_hi, BLOCK_K, warp_specialize=True):\n        a = descriptor_block("),
             "ws_tiles": ("        for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):",
                          "        for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), warp_specialize=True):")},
    "attention": {"base": None,
                  "ws_keys": ("    for start in range(lo, mid, BLOCK_N):",
                              "    for start in tl.range(lo, mid, BLOCK_N, warp_specialize=True):")},
}
KERNELS = pathlib.Path(__file__).resolve().parent.parent / "autotune" / "kernels"


def _load(name: str, text: str):
    path = pathlib.Path(f"/tmp/{name}.py")
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gemm_module(loop: str):
    base = importlib.import_module("autotune.kernels.gemm.gemm")
    if LOOPS["gemm"][loop] is None:
        return base
    old, new = LOOPS["gemm"][loop]
    source = (KERNELS / "_gemm.py").read_text()
    assert old in source, f"the GEMM's {loop} loop is not where this probe expects it"
    return _load(f"gemm_{loop}", source.replace(old, new))


def _attention_kernel(loop: str):
    """The forward kernel to launch: the module's, or a copy with the key loop replaced (its helpers are the module's)."""
    fa = importlib.import_module("autotune.kernels.attention.flash_attn")
    if LOOPS["attention"][loop] is None:
        return fa._attn_fwd_kernel
    old, new = LOOPS["attention"][loop]
    source = (KERNELS / "flash_attn.py").read_text()
    start = source.index("@triton.jit\ndef _attn_fwd_kernel(")
    kernel = source[start:source.index("@triton.jit", start + 10)]
    assert old in kernel, f"attention's {loop} loop is not where this probe expects it"
    header = ("from autotune.kernels.attention.flash_attn import *\nfrom autotune.kernels.flash_attn import _fwd_step\n"
              + source[source.index("import math"):source.index("COMBINE_ROWS =")])
    return _load(f"attention_{loop}", header + "\n" + kernel.replace(old, new))._attn_fwd_kernel


def _bench(fn) -> float:
    from autotune.measure import bench
    return bench.time_ms(fn, warmup_ms=25, rep_ms=150)


def run_gemm(loop: str, index: int) -> list[str]:
    import torch
    import torch.nn.functional as F

    module, base, config = _gemm_module(loop), _gemm_module("base"), GEMM_CONFIGS[index]
    rows = []
    for m, k, n, activation in GEMM_PROBLEMS:
        if loop == "ws_tiles" and not config["variant"].endswith("persistent"):
            continue
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if activation != "none" else None
        tflops = lambda ms: 2 * m * n * k / ms / 1e9  # noqa: E731
        shape = f"{m}x{k}x{n}" + (f",bias,{activation}" if bias is not None else "")
        if loop == "base" and index == 0:
            eager = (lambda: F.gelu(F.linear(x, w, bias), approximate="tanh")) if bias is not None else (lambda: x @ w.t())
            rows.append(f"| {shape} | torch eager | base | {tflops(_bench(eager)):.0f} | |")
        outs = []
        for mod in (base, module):
            y = torch.full((1, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            launch = lambda: mod.gemm(x.unsqueeze(0), w.t().unsqueeze(0), y, config, bias=bias, activation=activation)  # noqa: E731
            launch()
            torch.cuda.synchronize()
            outs.append((y.clone(), launch))
        diff = (outs[1][0].float() - outs[0][0].float()).abs().max().item()
        rows.append(f"| {shape} | {json.dumps(config)} | {loop} | {tflops(_bench(outs[1][1])):.0f} | {diff:.3g} |")
    return rows


def run_attention(loop: str, index: int) -> list[str]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fa = importlib.import_module("autotune.kernels.attention.flash_attn")
    fa._attn_fwd_kernel = _attention_kernel(loop)  # launch() looks the kernel up in its module
    config = dict(ATTENTION_CONFIGS[index], KV_SPLITS=1, gqa="per_head", kv_load="descriptor", mask="edges", p="rounded")
    rows = []
    for b, h, n, d, causal in ATTENTION_PROBLEMS:
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        tflops = lambda ms: 4 * b * h * n * n * d / (2 if causal else 1) / ms / 1e9  # noqa: E731
        shape = f"{b}x{h}x{n}x{d}" + ("+causal" if causal else "")
        if loop == "base" and index == 0:
            for name, backend in (("sdpa flash", SDPBackend.FLASH_ATTENTION), ("sdpa cuDNN", SDPBackend.CUDNN_ATTENTION)):
                with sdpa_kernel(backend):
                    ms = _bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                rows.append(f"| {shape} | {name} | | {tflops(ms):.0f} | |")
        o = torch.full_like(q, float("nan"))
        lse = torch.empty((b, h, n), device="cuda", dtype=torch.float32)
        launch = lambda: fa.launch(q, k, v, o, lse, causal, 1 / math.sqrt(d), config)  # noqa: E731
        launch()
        torch.cuda.synchronize()
        diff = (o.float() - F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()).abs().max().item()
        rows.append(f"| {shape} | {json.dumps(ATTENTION_CONFIGS[index])} | {loop} | {tflops(_bench(launch)):.0f} | {diff:.3g} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=60.0, help="limit of each (part, loop, config) process")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # PART:LOOP:INDEX, run in a child process
    args = parser.parse_args()
    if args.one:
        importlib.import_module("autotune")  # the interpreter choice, before Triton
        part, loop, index = args.one.split(":")
        rows = (run_gemm if part == "gemm" else run_attention)(loop, int(index))
        pathlib.Path(args.out).write_text("\n".join(rows) + "\n")
        return
    import torch
    import triton
    lines = [f"# Warp specialization probe: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", ""]
    for part, configs in (("gemm", GEMM_CONFIGS), ("attention", ATTENTION_CONFIGS)):
        unit = "the GEMM's output without it" if part == "gemm" else "sdpa's output"
        lines += ["", f"## {part}, bf16: TFLOP/s; max diff: from {unit}", "",
                  "| problem | config | loop | TFLOP/s | max diff |", "| --- | --- | --- | --- | --- |"]
        for index in range(len(configs)):
            for loop in LOOPS[part]:
                if part == "gemm" and loop == "ws_tiles" and not configs[index]["variant"].endswith("persistent"):
                    continue
                piece = pathlib.Path(f"{args.out}.{part}-{loop}-{index}")
                command = [sys.executable, __file__, "--out", str(piece), "--one", f"{part}:{loop}:{index}"]
                try:
                    done = subprocess.run(command, capture_output=True, text=True, timeout=args.seconds)
                    if done.returncode == 0:
                        lines += piece.read_text().splitlines()
                    else:
                        error = (done.stderr.strip().splitlines() or ["?"])[-1][:160]
                        lines.append(f"| all | {json.dumps(configs[index])} | {loop} | failed: {error} | |")
                except subprocess.TimeoutExpired:
                    lines.append(f"| all | {json.dumps(configs[index])} | {loop} | no result in {args.seconds:.0f} s (hung or slow) | |")
                piece.unlink(missing_ok=True)
                print(lines[-1], flush=True)
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
