"""What bounds a one-read group_norm + silu: copies with a group's dependency. Each program of `_phased_copy` loads a
chunk of the input (a group's bytes, or a part of one), sums it across the program (the block-wide reduction a
group's mean needs) and only then stores it, with or without group_norm's per-element work (silu of the normalized
value) after the sum; `_gn_onepass` is group_norm + silu of a contiguous group held whole in one program, read once.
Each is timed beside a device copy of the same bytes and the shipped group_norm + silu (bf16, CUDA-graph GPU time
with the L2 cleared before each replay: `autotune.measure.bench.graph_ms`).

    python benchmarks/group_norm_read_bound.py --check     (under the Triton interpreter: the kernels compute right)
    python benchmarks/group_norm_read_bound.py --out benchmarks/results/H100/group-norm-read-bound       (on a GPU)
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

if "--check" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from tabulate import tabulate

SHAPES = [(8, 512, 64, 64), (16, 320, 64, 64)]
GROUPS = 32
WORK = ("load-store", "load-sum-store", "load-sum-silu-store", "load-sum-silu-store (f32 kept)")


@triton.jit
def _phased_copy(x_ptr, y_ptr, a, b, CHUNK: tl.constexpr, REDUCE: tl.constexpr):
    o = tl.program_id(0).to(tl.int64) * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + o)
    if REDUCE == 1:  # every element of the chunk read (and summed across the program) before the first store
        s = tl.sum(x.to(tl.float32), axis=0)
        x = tl.where(s == s, x, 0.0).to(x.dtype)
    if REDUCE == 2:  # and group_norm's work per element after it: silu((x - mean) * a + b), in float32
        s = tl.sum(x.to(tl.float32), axis=0)
        mean = s / CHUNK
        z = (mean * 0.0).to(x.dtype)  # a runtime zero: the output's conversion comes after the sum, not merged with it
        v = ((x + z).to(tl.float32) - mean) * a + b
        x = (v / (1.0 + tl.exp(-v))).to(x.dtype)
    if REDUCE == 3:  # the same without the runtime zero: one conversion, its float32 copy live across the sum
        xf = x.to(tl.float32)
        mean = tl.sum(xf, axis=0) / CHUNK
        v = (xf - mean) * a + b
        x = (v / (1.0 + tl.exp(-v))).to(x.dtype)
    tl.store(y_ptr + o, x)


@triton.jit
def _add2(a1, a2, b1, b2):
    return a1 + b1, a2 + b2


@triton.jit
def _gn_onepass(x_ptr, y_ptr, w_ptr, b_ptr, groups, cg, eps, CG: tl.constexpr, HW: tl.constexpr, STAT64: tl.constexpr):
    """group_norm + silu of one contiguous (sample, group) of CG x HW elements (powers of two), read once: shifted
    sums and sums of squares in one pass, then the output from a second conversion kept apart from the first."""
    pid = tl.program_id(0)
    g = pid % groups
    base = pid.to(tl.int64) * (cg * HW)
    c = tl.arange(0, CG)
    s = tl.arange(0, HW)
    rows = c < cg  # CG: cg rounded up to a power of two
    x = tl.load(x_ptr + base + c[:, None] * HW + s[None, :], mask=rows[:, None], other=0.0)
    if STAT64:  # the sums in float64 (as the shipped kernels' means need to pass the gate)
        pivot = tl.load(x_ptr + base).to(tl.float64)
        d = tl.where(rows[:, None], x.to(tl.float64) - pivot, 0.0)
    else:
        pivot = tl.load(x_ptr + base).to(tl.float32)
        d = tl.where(rows[:, None], x.to(tl.float32) - pivot, 0.0)
    r1, r2 = tl.reduce((d, d * d), 1, _add2)
    s1, s2 = tl.reduce((r1, r2), 0, _add2)
    mean_d = s1 / (cg * HW)
    var = tl.maximum(s2 / (cg * HW) - mean_d * mean_d, 0.0)
    mean = (pivot + mean_d).to(tl.float32)
    rstd = (1.0 / tl.sqrt(var + eps)).to(tl.float32)
    a = tl.load(w_ptr + g * cg + c, mask=rows, other=0.0).to(tl.float32) * rstd
    b = tl.load(b_ptr + g * cg + c, mask=rows, other=0.0).to(tl.float32) - mean * a
    zero = (mean * 0.0).to(x.dtype)
    v = (x + zero).to(tl.float32) * a[:, None] + b[:, None]
    tl.store(y_ptr + base + c[:, None] * HW + s[None, :], (v / (1.0 + tl.exp(-v))).to(x.dtype), mask=rows[:, None])


def phased(x: torch.Tensor, y: torch.Tensor, chunk: int, work: int, warps: int) -> None:
    _phased_copy[(x.numel() // chunk,)](x, y, 1.0, 0.0, CHUNK=chunk, REDUCE=work, num_warps=warps)


def onepass(x, y, w, b, groups: int, stat64: bool, warps: int = 4) -> None:
    n, c = x.shape[:2]
    cg, hw = c // groups, x[0, 0].numel()
    _gn_onepass[(n * groups,)](
        x, y, w, b, groups, cg, 1e-5, CG=triton.next_power_of_2(cg), HW=hw, STAT64=stat64, num_warps=warps
    )


def check() -> None:
    """Under the interpreter: the copies copy, the silu variant normalizes, onepass matches float64."""
    x = torch.randn(4 * 256, dtype=torch.float16)
    for work in (0, 1):
        y = torch.full_like(x, float("nan"))
        phased(x, y, 256, work, 4)
        assert torch.equal(x, y), WORK[work]
    v = x.float().view(4, 256)
    for work in (2, 3):
        y = torch.full_like(x, float("nan"))
        phased(x, y, 256, work, 4)
        assert torch.allclose(y.float().view(4, 256), F.silu(v - v.mean(1, keepdim=True)), atol=2e-3), WORK[work]
    for channels in (8, 12):  # 2 and 3 channels a group (3: rows masked)
        x = torch.randn(2, channels, 4, 4) * 2 + 0.5
        w, b = torch.randn(channels), torch.randn(channels)
        ref = F.silu(F.group_norm(x.double(), 4, w.double(), b.double(), 1e-5))
        for stat64 in (False, True):
            y = torch.full_like(x, float("nan"))
            onepass(x, y, w, b, 4, stat64)
            assert (y.double() - ref).abs().max() < 1e-4, (y.double() - ref).abs().max()
    print("ok")


def measure() -> list[dict]:
    from autotune.kernels import group_norm
    from autotune.measure.bench import graph_ms

    results = []
    for shape in SHAPES:
        x = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
        y = torch.empty_like(x)
        w = torch.randn(shape[1], dtype=x.dtype, device="cuda")
        b = torch.randn_like(w)
        row = {
            "shape": "x".join(map(str, shape)),
            "group_elements": x.numel() // (shape[0] * GROUPS),
            "copy": graph_ms(lambda: y.copy_(x)),
            "group_norm+silu (shipped)": graph_ms(lambda: group_norm(x, GROUPS, w, b, 1e-5, "silu")),
        }
        for chunk in (16384, 32768, 65536):
            for warps in (16, 32):
                for work, label in enumerate(WORK):
                    row[f"chunk {chunk} warps {warps} {label}"] = graph_ms(lambda: phased(x, y, chunk, work, warps))
                    assert work >= 2 or torch.equal(x, y)
        ref = F.silu(F.group_norm(x.double(), GROUPS, w.double(), b.double(), 1e-5))
        row["torch err"] = (F.silu(F.group_norm(x, GROUPS, w, b, 1e-5)).double() - ref).abs().max().item()
        row["shipped err"] = (group_norm(x, GROUPS, w, b, 1e-5, "silu").double() - ref).abs().max().item()
        for stat64 in (False, True):
            for warps in (16, 32):
                name = f"onepass group_norm+silu {'stat64' if stat64 else 'stat32'} warps {warps}"
                y.fill_(float("nan"))
                row[name] = graph_ms(lambda: onepass(x, y, w, b, GROUPS, stat64, warps))
                row[name + " err"] = (y.double() - ref).abs().max().item()
        results.append(row)
    return results


def markdown(header: str, results: list[dict]) -> str:
    lines = [
        "# What bounds a one-read group_norm + silu",
        "",
        header,
        "",
        "ms: CUDA-graph GPU time, L2 cleared before each replay. A chunk: the elements one program loads, sums across "
        "itself and only then stores (a group is 65536 elements at 8x512x64x64, 40960 at 16x320x64x64); onepass: "
        "group_norm + silu of a whole group held in one program, read once (err: max abs error against float64).",
        "",
    ]
    for row in results:
        lines += [
            f"## {row['shape']} (bf16)",
            "",
            tabulate(
                [
                    (key, value, row["copy"] / value if "err" not in key and key != "group_elements" else None)
                    for key, value in row.items()
                    if key != "shape"
                ],
                headers=("measured", "ms (err)", "copy / it"),
                tablefmt="github",
                floatfmt=".4g",
            ),
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="check the kernels under the Triton interpreter")
    parser.add_argument("--out", help="writes OUT.md and OUT.json (a GPU)")
    args = parser.parse_args()
    if args.check:
        check()
        return
    if not args.out or not torch.cuda.is_available():
        parser.error("--out and a CUDA GPU are needed to measure (or --check)")
    warnings.simplefilter("ignore")
    from autotune.measure import environment, report

    env = environment.environment()
    results = measure()
    text = markdown(environment.probe_header(env, "bf16, 32 groups"), results)
    print(text)
    report.save(args.out, {"environment": env, "results": results}, text)


if __name__ == "__main__":
    main()
