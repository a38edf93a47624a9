"""Registers and spills of the layer/rms_norm backward kernel as ptxas allocates them for sm_90a (H100),
with no GPU: the kernel is compiled to PTX for that target and assembled by the ptxas bundled with Triton.

    python benchmarks/norm_backward_spills.py

One line per (norm, BLOCK_N, num_warps): registers per thread, spill stores and loads (bytes per thread),
stack frame. bf16 x, dy, weight and residual gradient (float32 arithmetic); the single-chunk path, BLOCK_M rows
at a time read once (READS=1: their tiles held across the row sums) or one row read twice, the atomic variant,
2 stages. The CPU's Triton compiles here, not the GPU's: read the figures as a comparison
of two kernel sources under one compiler.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # compile for real: the interpreter hands back no PTX

import argparse  # noqa: E402
import glob  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402

import triton  # noqa: E402
from tabulate import tabulate  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # autotune warns that Triton came first: wanted here
    from autotune.kernels import layer_norm_backward  # noqa: E402

SIGNATURE = {
    "dy_ptr": "*bf16", "x_ptr": "*bf16", "w_ptr": "*bf16", "mean_ptr": "*fp32", "dh_ptr": "*bf16", "dx_ptr": "*bf16",
    "dw_ptr": "*fp32", "db_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32", "dy_stride": "i32", "x_stride": "i32",
    "dh_stride": "i32", "dx_stride": "i32", "eps": "fp32",
}
CONSTEXPRS = ("IS_RMS", "HAS_WEIGHT", "HAS_BIAS", "HAS_DH", "ATOMIC", "ONE_CHUNK", "ONE_READ", "ACC", "BLOCK_M", "BLOCK_N")


def ptxas_report(ptx: str) -> str:
    """ptxas -v's resource lines for ptx, from the first bundled ptxas that accepts its PTX version."""
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        errors = []
        for ptxas in sorted(glob.glob(os.path.join(bin_dir, "ptxas*"))):
            run = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", src, "-o", os.path.join(tmp, "k.cubin")],
                                 capture_output=True, text=True)
            if run.returncode == 0:
                return run.stderr
            errors.append(f"{os.path.basename(ptxas)}: {run.stderr.strip()}")
    raise RuntimeError("no bundled ptxas assembled the kernel:\n" + "\n".join(errors))


def resources(rms: bool, block: int, warps: int, reads: int, rows: int = 1) -> dict:
    """Registers, spill bytes and stack frame of one specialization."""
    values = dict(IS_RMS=rms, HAS_WEIGHT=True, HAS_BIAS=not rms, HAS_DH=True, ATOMIC=True, ONE_CHUNK=True,
                  ONE_READ=reads == 1, ACC=triton.language.float32, BLOCK_M=rows, BLOCK_N=block)
    source = ASTSource(layer_norm_backward._norm_backward_kernel, {**SIGNATURE, **dict.fromkeys(CONSTEXPRS, "constexpr")},
                       values)
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                            options=dict(num_warps=warps, num_stages=2, enable_fp_fusion=False))
    report = ptxas_report(kernel.asm["ptx"])

    def number(pattern: str) -> int:
        found = re.search(pattern, report)
        return int(found.group(1)) if found else 0

    return {"norm": "rms_norm" if rms else "layer_norm", "READS": reads, "BLOCK_M": rows, "BLOCK_N": block,
            "num_warps": warps,
            "registers": number(r"Used (\d+) registers"), "spill stores B": number(r"(\d+) bytes spill stores"),
            "spill loads B": number(r"(\d+) bytes spill loads"), "stack B": number(r"(\d+) bytes stack frame")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, action="append", help="BLOCK_N (repeatable; default 4096 and 8192)")
    parser.add_argument("--warps", type=int, action="append", help="num_warps (repeatable; default 8, 16, 32)")
    parser.add_argument("--rows", type=int, action="append", help="BLOCK_M where READS=1 (repeatable; default 1)")
    args = parser.parse_args()
    rows = [resources(rms, block, warps, reads, m) for rms in (False, True) for reads in (1, 2)
            for m in (args.rows or [1] if reads == 1 else [1])
            for block in args.block or (4096, 8192) for warps in args.warps or (8, 16, 32) if block // (32 * warps) >= 1]
    print(f"Triton {triton.__version__}, target sm_90a")
    print(tabulate(rows, headers="keys", tablefmt="github"))


if __name__ == "__main__":
    main()
