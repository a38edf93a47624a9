"""Same-run A/B of two versions of the group_norm forward kernels (this tree's against a copy of another
version's `autotune/kernels/group_norm.py`), on the bf16 presets with silu, for a few configs: each launch's
output is checked against float64 (after poisoning it with NaN) before it is timed; times are medians of
triton.testing.do_bench. Speed only: the gate (autotune search / db verify) judges accuracy.

    git show main:autotune/kernels/group_norm.py > /tmp/group_norm_main.py      # on this machine; carry it over
    python benchmarks/group_norm_ab.py --other /tmp/group_norm_main.py --out benchmarks/results/NAME.md
"""

from __future__ import annotations

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
import argparse
import datetime
import importlib
import importlib.util
import json
import pathlib
import sys
import tempfile

import torch
import torch.nn.functional as F
import triton


CONFIGS = [{"variant": "looped", "BLOCK": block, "SPLIT": 1, "num_warps": warps, "num_stages": 1}
           for block, warps in ((8192, 16), (16384, 8), (16384, 16), (16384, 32), (32768, 32))]
CONFIGS.append({"variant": "split", "BLOCK": 4096, "SPLIT": 4, "num_warps": 4, "num_stages": 1})
SHAPES = ((8, 512, 64, 64), (16, 320, 64, 64))


def load_kernels(path: pathlib.Path):
    """The kernels and launch functions of another group_norm.py (its text up to the KernelSpec, whose custom
    ops this process has registered already), as a module."""
    text = path.read_text()
    copy = pathlib.Path(tempfile.mkdtemp()) / "group_norm_other.py"
    copy.write_text(text[: text.index("SPEC = KernelSpec(")])  # Triton reads a kernel's source from its file
    spec = importlib.util.spec_from_file_location("group_norm_other", copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, type=pathlib.Path, help="another version's group_norm.py")
    parser.add_argument("--out", type=pathlib.Path, help="also write the table here (.md)")
    args = parser.parse_args()
    if autotune.gpu.interpreter_active():
        sys.exit("group_norm_ab.py times kernels on a GPU")
    versions = {"other": load_kernels(args.other), "this": importlib.import_module("autotune.kernels.norm.group_norm")}
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")  # noqa: E731
    lines = [f"# group_norm forward A/B: this tree against {args.other.name}",
             f"{torch.cuda.get_device_name()}; torch {torch.__version__}; triton {triton.__version__}; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}; bf16, silu, weight and bias",
             "", "| shape | config | other us | this us | other / this | max error vs float64: other, this |",
             "| --- | --- | --- | --- | --- | --- |"]
    for shape in SHAPES:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(shape, generator=gen).to("cuda", torch.bfloat16)
        w = torch.randn(shape[1], generator=gen).to("cuda", torch.bfloat16)
        b = torch.randn(shape[1], generator=gen).to("cuda", torch.bfloat16)
        ref = F.silu(F.group_norm(x.double(), 32, w.double(), b.double(), 1e-5))
        y = torch.empty_like(x)
        mean = torch.empty((shape[0], 32), dtype=torch.float64, device="cuda")
        rstd = torch.empty((shape[0], 32), dtype=torch.float32, device="cuda")
        lines.append(f"| {shape} | y.copy_(x) (the bytes moved) | {bench(lambda: y.copy_(x)) * 1e3:.1f} | | | |")
        for config in CONFIGS:
            timed = {}
            for name, module in versions.items():
                y.fill_(float("nan"))
                module._launch(x, y, w, b, mean, rstd, 32, 1e-5, "silu", config)
                error = (y.double() - ref).abs().max().item()
                timed[name] = (bench(lambda: module._launch(x, y, w, b, mean, rstd, 32, 1e-5, "silu", config)), error)
            (t_other, e_other), (t_this, e_this) = timed["other"], timed["this"]
            lines.append(f"| {shape} | {json.dumps(config)} | {t_other * 1e3:.1f} | {t_this * 1e3:.1f} | "
                         f"{t_other / t_this:.3f} | {e_other:.3g}, {e_this:.3g} |")
            print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
