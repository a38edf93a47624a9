"""Is layer_norm's float32 single-pass gate failure on the GPU the kernel's arithmetic or the gate's judgement?

On the H100 every config of the float32 16384x8192+res bucket failed the gate on a 4097-wide row with a bias and
no weight (twenty-fifth and twenty-seventh sessions). This probe checks the shipped single-pass kernel, four
variants of its arithmetic (variance summed in float64, rstd in float64, both, both with the affine step as one
FMA) and the looped kernel on the same float32 problems (Hypothesis draws with rows of 4097-8192 elements, and
fixed 4097-wide rows with a bias, with and without weight, residual, offset and large magnitudes), each judged by
the gate twice: with layer_norm's error floor (`KernelSpec.error_floor`: the output's error measured against
sqrt(z^2 + b^2), the size of the normalized value and the bias that cancel in y = z + b) and without it.

    python benchmarks/layer_norm_gate_probe.py --count 150 --out results/layer-norm-gate-probe-GPU-DATE

It runs under the interpreter too (slowly: `--count 5`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import time

import autotune  # noqa: F401  (before Triton: without a GPU it switches the interpreter on)
import torch
import triton
import triton.language as tl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from autotune.measure import report
from autotune.kernels.norm import problems as problems_
from autotune.kernels.norm.layer_norm import LAYER_NORM, _affine_store, _load_sum, _store_mean
from autotune.gate.verify import ReferenceCache, check_problem

ln = importlib.import_module("autotune.kernels.norm.layer_norm")  # the package's name is the function


@triton.jit
def _single_variant(
    x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, h_ptr, mean_ptr, rstd_ptr,
    n_rows, n_cols, x_stride, r_stride, y_stride, h_stride, eps,
    IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr, VAR64: tl.constexpr, RSTD64: tl.constexpr,
    FMA: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    row_ok = rows < n_rows
    rows = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = row_ok[:, None] & col_ok[None, :]
    x = _load_sum(x_ptr, r_ptr, h_ptr, rows[:, None] * x_stride + cols[None, :], rows[:, None] * r_stride + cols[None, :],
                  rows[:, None] * h_stride + cols[None, :], mask, HAS_RESIDUAL, True)
    n = tl.zeros((ROWS_PER_PROGRAM,), tl.float32) + n_cols
    if IS_RMS:
        xc = x
    else:
        hi, lo = _store_mean(mean_ptr, rows, n_rows, row_ok, tl.sum(x.to(tl.float64), axis=1) / n)
        xc = tl.where(mask, (x - hi[:, None]) - lo[:, None], 0.0)
    if VAR64:
        d = xc.to(tl.float64)
        var = tl.sum(d * d, axis=1) / n
    else:
        var = tl.sum(xc * xc, axis=1) / n
    if RSTD64:
        rstd = (1.0 / tl.sqrt(var.to(tl.float64) + eps)).to(tl.float32)
    else:
        rstd = tl.rsqrt(var.to(tl.float32) + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    if FMA:
        y_offs = rows[:, None] * y_stride + cols[None, :]
        y = xc.to(tl.float32)
        if HAS_WEIGHT:
            w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        else:
            w = 1.0
        if HAS_BIAS:
            b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            y = tl.fma(y, rstd[:, None] * w, b)
        else:
            y = y * (rstd[:, None] * w)
        tl.store(y_ptr + y_offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        _affine_store(xc, rstd, w_ptr, b_ptr, y_ptr, rows[:, None] * y_stride + cols[None, :], cols, col_ok, mask,
                      HAS_WEIGHT, HAS_BIAS)


def launch_variant(flags, inputs, config, out):
    k = len(inputs["normalized_shape"])
    x = ln._as_rows(inputs["x"], k)
    residual = ln._as_rows(inputs["residual"], k)
    y, h = (out, None) if residual is None else out
    if x.numel() == 0:
        return out
    stats = torch.empty((3, x.shape[0]), dtype=torch.float32, device=x.device)
    weight, bias = ln.backward_.flat(inputs["weight"]), ln.backward_.flat(inputs["bias"])
    y2 = y.view(x.shape)
    h2 = None if h is None else h.view(x.shape)
    n_rows, n_cols = x.shape
    _single_variant[(n_rows,)](
        x, x if residual is None else residual, x if weight is None else weight, x if bias is None else bias,
        y2, y2 if h2 is None else h2, stats[:2], stats[2], n_rows, n_cols, x.stride(0),
        0 if residual is None else residual.stride(0), y2.stride(0), 0 if h2 is None else h2.stride(0), inputs["eps"],
        IS_RMS=False, HAS_RESIDUAL=residual is not None, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        BLOCK_N=config["BLOCK_N"], ROWS_PER_PROGRAM=1, num_warps=config["num_warps"], num_stages=1, **flags)
    return out


VARIANTS = {
    "shipped single": None,
    "var64": dict(VAR64=True, RSTD64=False, FMA=False),
    "rstd64": dict(VAR64=False, RSTD64=True, FMA=False),
    "var64+rstd64": dict(VAR64=True, RSTD64=True, FMA=False),
    "var64+rstd64+fma": dict(VAR64=True, RSTD64=True, FMA=True),
    "shipped looped": None,
}
SINGLE = {"variant": "single", "BLOCK_N": 8192, "ROWS_PER_PROGRAM": 1, "num_warps": 32, "num_stages": 1}
LOOPED = {"variant": "looped", "BLOCK_N": 1024, "ROWS_PER_PROGRAM": 1, "num_warps": 4, "num_stages": 2}


def spec_of(name: str, floor: bool):
    flags = VARIANTS[name]
    spec = LAYER_NORM if flags is None else dataclasses.replace(
        LAYER_NORM, launch=lambda inputs, config, out: launch_variant(flags, inputs, config, out))
    return spec if floor else dataclasses.replace(spec, error_floor=None)


def draw_problems(count: int) -> list[dict]:
    """count Hypothesis draws with rows of 4097-8192 elements, then the fixed 4097-wide rows with a bias."""
    drawn = []

    @settings(max_examples=count, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(problems_.problems(1 << 20, rms=False, row_lengths=st.integers(4097, 8192)))
    def collect(problem):
        drawn.append(problem)

    collect()
    fixed = [problems_.problem([rows, 4097], rms=False, weight=weight, bias=True, residual=residual, values=values,
                               magnitude=magnitude)
             for rows in (3, 33) for weight in (False, True) for residual in (False, True)
             for values in ("random", "offset") for magnitude in (1.0, 1e4)]
    return fixed + drawn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=150, help="Hypothesis draws besides the 32 fixed problems")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    parser.add_argument("--out", help="write OUT.md and OUT.json")
    args = parser.parse_args()
    problems = draw_problems(args.count)
    rows, caches = [], {True: ReferenceCache(), False: ReferenceCache()}  # a cache keeps its spec's floors
    for name in args.variants.split(","):
        config = LOOPED if name == "shipped looped" else SINGLE
        for floor in (True, False):
            spec, failed, started = spec_of(name, floor), [], time.time()
            for seed, problem in enumerate(problems):
                failure = check_problem(spec, config, problem, torch.float32, seed=seed, cache=caches[floor])
                if failure is not None:
                    failed.append(f"seed {seed}: {failure.describe()}")
            rows.append([name, "with" if floor else "without", len(problems), len(failed), failed[0] if failed else ""])
            print(f"{name}, {rows[-1][1]} the floor: {len(failed)} of {len(problems)} fail ({time.time() - started:.0f} s)"
                  + (f"; first: {failed[0]}" if failed else ""), flush=True)
    env = report.environment()
    header = report.probe_header(env, "float32", f"{len(problems)} problems", f"single-pass {json.dumps(SINGLE)}",
                                 f"looped {json.dumps(LOOPED)}")
    table = tabulate(rows, ["kernel", "error floor", "problems", "failed", "first failure"], tablefmt="github")
    text = header + "\n\n" + table + "\n"
    print(text)
    if args.out:
        report.save(args.out, {**env, "rows": rows}, text)


if __name__ == "__main__":
    main()
