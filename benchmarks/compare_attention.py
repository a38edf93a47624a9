"""Same-run benchmark of flash_attn against torch's sdpa with its flash, cuDNN and efficient backends forced
in turn: the forward, and the forward plus backward, on flash_attn's preset shapes (or --shape).

    python benchmarks/compare_attention.py --dtype bf16 --out benchmarks/results/NAME

Writes NAME.md (tables, and the issue's goals for bf16 at head dim 128 checked) and NAME.json (one record
per shape, dtype, implementation and pass) with the GPU name, versions and date. Medians of
triton.testing.do_bench, one process. TFLOP/s as FlashAttention counts them: 4 * B * H * Nq * Nk * D for
the forward, half when causal; the backward 2.5 times that. Decode shapes (Nq = 1) time the forward only.
A backend that refuses a shape is recorded as unsupported, with torch's reason.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from tabulate import tabulate
from torch.nn.attention import SDPBackend, sdpa_kernel

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune import gpu, runtime
from autotune.kernels import flash_attn
from autotune.measure import bench, environment, report
from autotune.spec import DTYPE_NAMES, dtype_from_name, shape_label

BACKENDS = {
    "sdpa-flash": SDPBackend.FLASH_ATTENTION,
    "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
}
GOALS = (("fwd", "sdpa-flash", 1.5), ("fwd", "sdpa-cudnn", 0.9), ("fwd+bwd", "sdpa-flash", 1.3))
"""The issue's goals for bf16 at head dim 128: flash_attn's speed over the backend's, at least."""


def _inputs(problem: dict, dtype: torch.dtype, grad: bool):
    spec = autotune.get("flash_attn")
    inputs = spec.make_inputs(problem, dtype, gpu.device(), 0)
    q, k, v = (inputs[n].detach().requires_grad_(grad) for n in ("q", "k", "v"))
    return q, k, v, dict(is_causal=inputs["is_causal"], scale=inputs["scale"], enable_gqa=inputs["enable_gqa"])


def _implementations(kwargs: dict):
    def ours(q, k, v):
        return flash_attn(q, k, v, **kwargs)

    impls = {"flash_attn": ours}
    for name, backend in BACKENDS.items():

        def forced(q, k, v, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, **kwargs)

        impls[name] = forced
    return impls


def _timed(fn, q, k, v, do, backward: bool) -> float:
    if backward:

        def step():
            torch.autograd.grad(fn(q, k, v), (q, k, v), do)  # fresh gradients: no accumulation kernels timed
    else:

        def step():
            with torch.no_grad():
                fn(q, k, v)

    step()  # compile (Triton) and pick kernels before timing starts
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return bench.time_ms(step, warmup_ms=50, rep_ms=300)


def run(problems: list[dict], dtypes: list[torch.dtype]) -> dict:
    records = []
    for dtype in dtypes:
        for problem in problems:
            spec = autotune.get("flash_attn")
            bucket = spec.bucket(problem)
            fwd_flops = spec.cost(problem, dtype).flops
            passes = ("fwd",) if problem["nq"] == 1 else ("fwd", "fwd+bwd")
            for kind in passes:
                backward = kind == "fwd+bwd"
                q, k, v, kwargs = _inputs(problem, dtype, backward)
                do = torch.randn_like(q)
                impls = _implementations(kwargs)
                with torch.no_grad():
                    reference = impls["flash_attn"](q, k, v)
                for impl, fn in impls.items():
                    record = {
                        "shape": shape_label(problem),
                        "problem": problem,
                        "dtype": DTYPE_NAMES[dtype],
                        "pass": kind,
                        "impl": impl,
                    }
                    try:
                        with torch.no_grad():
                            out = fn(q, k, v)
                        record["max_abs_diff_vs_flash_attn"] = float((out.float() - reference.float()).abs().max())
                        ms = _timed(fn, q, k, v, do, backward)
                    except RuntimeError as exc:  # sdpa refuses shapes its backend cannot run
                        record.update(median_ms=None, tflops=None, unsupported=str(exc).strip().splitlines()[0][:200])
                        records.append(record)
                        continue
                    flops = fwd_flops * (3.5 if backward else 1.0)
                    record.update(median_ms=ms, tflops=flops / ms / 1e9)
                    records.append(record)
                for name, table in (("flash_attn", "flash_attn"), ("flash_attn_backward", "flash_attn_backward")):
                    choice = runtime.tuned(autotune.get(table)).choice(dtype, bucket)
                    if choice is not None:
                        records[-len(impls)]["config_" + name] = {"config": choice.config, "source": choice.source}
    cudnn = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    return {**environment.environment(), "cudnn": cudnn, "records": records}


def _rows(result: dict) -> list[dict]:
    rows: dict[tuple, dict] = {}
    for r in result["records"]:
        key = (r["dtype"], r["shape"], r["pass"])
        row = rows.setdefault(
            key, {"dtype": r["dtype"], "shape": r["shape"], "pass": r["pass"], "head_dim": r["problem"]["head_dim"]}
        )
        row[f"{r['impl']} ms"] = r["median_ms"]
        row[f"{r['impl']} TFLOP/s"] = r["tflops"]
    for row in rows.values():
        ours = row["flash_attn ms"]
        for name in BACKENDS:
            theirs = row.get(f"{name} ms")
            row[f"x {name}"] = theirs / ours if theirs and ours else None
    return list(rows.values())


def goals(result: dict) -> list[dict]:
    """Each goal on each bf16 head-dim-128 shape: met, missed, or not measurable (backend unsupported)."""
    out = []
    for row in _rows(result):
        if row["dtype"] != "bf16" or row["head_dim"] != 128:
            continue
        for kind, backend, target in GOALS:
            if row["pass"] != kind:
                continue
            ratio = row.get(f"x {backend}")
            out.append(
                {
                    "shape": row["shape"],
                    "goal": f"{kind} >= {target}x {backend}",
                    "ratio": ratio,
                    "met": None if ratio is None else ratio >= target,
                }
            )
    return out


def table(result: dict) -> str:
    head = (
        f"GPU: {result['gpu']} ({result['device_name']}); torch {result['torch']}; triton {result['triton']}; "
        f"cuDNN {result['cudnn']}; date {result['date']}\n\n"
    )
    body = tabulate(_rows(result), headers="keys", floatfmt=".4g", tablefmt="github")
    checked = goals(result)
    met = sum(1 for g in checked if g["met"])
    summary = f"\n\nGoals (bf16, head dim 128): {met} of {len(checked)} met\n\n"
    summary += tabulate(checked, headers="keys", floatfmt=".3g", tablefmt="github") if checked else "no bf16 d=128 rows"
    unsupported = sorted({(r["impl"], r["unsupported"]) for r in result["records"] if r.get("unsupported")})
    notes = "".join(f"\n- {impl}: {why}" for impl, why in unsupported)
    return head + body + summary + ("\n\nUnsupported:" + notes if notes else "") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", action="append", default=None, help="bf16, fp16 (repeatable; default both)")
    parser.add_argument("--shape", action="append", default=[], help="flash_attn shape like 4x16x4096x128+causal")
    parser.add_argument("--out", required=True, help="path prefix for .md and .json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU: the sdpa backends compared against run on CUDA only")
    spec = autotune.get("flash_attn")
    problems = [spec.parse_shape(s) for s in args.shape] or list(spec.presets)
    result = run(problems, [dtype_from_name(d) for d in (args.dtype or ["bf16", "fp16"])])
    text = table(result)
    report.save(args.out, result, text)
    print(text)


if __name__ == "__main__":
    main()
