"""Nearest-bucket quality (issue 7): on shapes between the tuned buckets, the config the runtime launches against
a search of that exact shape; the goal is a mean of runtime ms / exact ms within 10%.

    python benchmarks/off_bucket.py --kernel softmax --kernel vector_add --dtype bf16 --timeout 25 --out NAME
    python benchmarks/off_bucket.py --kernel matmul --dtype bf16 --shape matmul=3072x3072x3072 --out NAME
    python benchmarks/off_bucket.py --merge RUN1.json --merge RUN2.json --out NAME   # several runs as one report

The runtime's config is what a call would launch here (exact bucket, nearest bucket or default, from the shipped
database and $AUTOTUNE_DB); the exact search is `autotune search` on that one problem, stored nowhere. Both are
timed in one process on the same random inputs (medians of triton.testing.do_bench, and on a GPU of each call
replayed from a CUDA graph: the ratio is of those GPU times, which a host path longer than do_bench's L2 clear
does not blur). Shapes default to a few per kernel that no shipped row was tuned on. Writes NAME.json (GPU,
versions, date, every record, the summary) and NAME.md after each shape, so a run cut short keeps the shapes it
finished. --merge measures nothing: it joins saved runs (or an earlier merged report and new runs) into one report,
a later run's record of a shape replacing an earlier one's (listed as superseded).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib

from autotune.engine.precompile import CompilePool, default_workers
from autotune.measure import (
    environment,
    offbucket,
    report,  # first: autotune picks the Triton interpreter without a GPU
)
from autotune.runtime import registry
from autotune.spec import DTYPE_NAMES, dtype_from_name

DEFAULT_SHAPES = {
    "vector_add": ["3000000", "50000000"],
    "softmax": ["4096x6144", "2048x12288", "3000x3000"],
    "softmax_backward": ["4096x6144", "2048x12288", "3000x3000"],
    "layer_norm": ["4096x5120+res", "12288x2048+res"],
    "rms_norm": ["4096x5120+res", "12288x2048+res"],
    "group_norm": ["4x256x48x48,groups=32,activation=silu"],
    "matmul": ["3072x3072x3072", "6144x4096x11008"],
    "linear": ["6144x4096x11008,bias,gelu_tanh", "4096x2048x8192,bias,gelu_tanh", "4096x8192x2048,bias"],
    "mlp": ["4096x2048x8192x2048,bias,gelu_tanh", "4096x1024x2048x512,bias,gelu_tanh"],
    "gated_mlp": ["4096x4096x11008x4096", "6144x4096x14336x4096"],
    "gated_mlp_backward": ["4096x11008", "6144x14336"],
    "layer_norm_backward": ["4096x5120+res", "12288x2048+res"],
    "rms_norm_backward": ["4096x5120+res", "12288x2048+res"],
    "group_norm_backward": ["4x256x48x48,groups=32,activation=silu"],
    "flash_attn": ["4x16x3072x128+causal", "8x16x1536x64"],
    "flash_attn_backward": ["4x16x3072x128+causal", "8x16x1536x64"],
    "rope": ["1x32/8x3000x128", "3x32/8x2048x128"],
    "rope_backward": ["1x32/8x3000x128", "3x32/8x2048x128"],
}
"""Between the buckets of the shipped rows: in a stored bucket off its timed problem (softmax 4096x6144 and
3000x3000, matmul 3072^3, linear, attention), or in a bucket with no row, served by the nearest (the norms'
backwards, mlp). mlp at n=2048 has one valid config, two_pass (fused would recompute its first product 16 times):
there its two GEMMs are linear's, and linear's 4096x2048x8192 and 4096x8192x2048 are those two; at n=512 fused
configs compete. gated_mlp and gated_mlp_backward: Llama 2 7B's MLP (intermediate 11008) in the bucket of Llama 3's
at 4096 tokens, and Llama 3's at 6144 tokens in the bucket of its 8192. rope and rope_backward: 3000 positions in
the bucket of 4096, and 6144 rows (3 x 2048) in that of the 4 x 2048 preset."""


def table(result: dict) -> str:
    """The records as a table, then the summary per kernel and overall, and whether the goal is met; for a
    merged result, each run's date and search budget, and the superseded records."""
    runs = result.get("runs")
    rows = [
        {
            **({"run": r["run"]} if runs else {}),
            "kernel": r["kernel"],
            "shape": r["shape"],
            "bucket": r["bucket"],
            "runtime config from": r["source"] + (f" {r['tuned_for']} ({r['tuned_on']})" if r["tuned_for"] else ""),
            "same config": r["same_config"],
            "evaluations": r["evaluations"],
            "search s": r["search_seconds"],
            **{f"{name} ms": offbucket.config_ms(r, name) for name in ("runtime", "exact", "default")},
            "timed": _timed(r),
            "ratio": r.get("ratio"),
            "note": r.get("error") or r.get("runtime_failure") or offbucket.left_out(r),
        }
        for r in result["records"]
    ]
    summary = result["summary"]
    lines = [
        f"GPU: {result['gpu']} ({result['device_name']}); torch {result['torch']}; triton {result['triton']}; "
        f"date {result['date']}",
        f"timings: {result['timing']}",
    ]
    if runs:
        lines += [
            f"run {i}: {run['date']}, torch {run['torch']}, triton {run['triton']}; exact search: {_budget(run)}"
            for i, run in enumerate(runs)
        ]
    else:
        lines.append(f"exact search: {_budget(result)}")
    lines += [
        "ratio = runtime ms / exact ms (above 1: the exact search found a faster config); timed: CUDA graph = the "
        "GPU's time alone (each call replayed from a graph), do_bench = host and GPU",
        "",
        report.tabulated(rows),
    ]
    for name, s in [*summary["kernels"].items(), ("overall", summary["overall"])]:
        if s:
            lines.append(
                f"- {name}: mean {s['mean']:.3f}, geomean {s['geomean']:.3f}, worst {s['worst']:.3f} over "
                f"{s['shapes']} shape(s); the exact search did not beat the runtime on {s['exact_slower']}"
            )
    if summary["unmeasured"]:
        lines.append(f"- {summary['unmeasured']} shape(s) without a ratio (see note)")
    if summary.get("left_out"):
        lines.append(f"- {summary['left_out']} shape(s) left out of the summary (see note)")
    lines.append(f"\nGoal (mean ratio <= {summary['goal']:.2f}): {'met' if summary['goal_met'] else 'NOT met'}")
    if result.get("superseded"):
        lines += [
            "",
            "Superseded by a later run's record of the same shape (not in the summary):",
            "",
            report.tabulated(
                [
                    {
                        "run": r["run"],
                        "kernel": r["kernel"],
                        "shape": r["shape"],
                        "runtime config from": r["source"] + (f" {r['tuned_for']}" if r["tuned_for"] else ""),
                        **{f"{name} ms": offbucket.config_ms(r, name) for name in ("runtime", "exact")},
                        "timed": _timed(r),
                        "ratio": r.get("ratio"),
                    }
                    for r in result["superseded"]
                ]
            ),
        ]
    return "\n".join(lines) + "\n"


def _timed(record: dict) -> str:
    return "CUDA graph" if "exact_gpu_ms" in record else "do_bench"


def _budget(run: dict) -> str:
    return f"{run['trials']} evaluations" + (f", timeout {run['timeout']:g} s" if run.get("timeout") else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--kernel", action="append", default=[], help=f"repeatable; default: {', '.join(DEFAULT_SHAPES)}"
    )
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument(
        "--shape", action="append", default=[], help="KERNEL=SPEC, repeatable (default: DEFAULT_SHAPES)"
    )
    parser.add_argument("--trials", type=int, default=30, help="evaluations per exact search")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per exact search")
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--final-examples", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="output path without extension")
    parser.add_argument(
        "--merge",
        action="append",
        default=[],
        metavar="RUN.json",
        help="repeatable: join these saved runs (oldest first) into one report; measures nothing",
    )
    args = parser.parse_args()
    if args.merge:
        if args.kernel or args.shape:
            raise SystemExit("off_bucket.py: --merge measures nothing; drop --kernel and --shape")
        try:
            result = {
                **offbucket.merge([json.loads(pathlib.Path(path).read_text()) for path in args.merge]),
                "timing": offbucket.TIMING_METHOD,
            }
        except (OSError, ValueError, KeyError) as exc:
            raise SystemExit(f"off_bucket.py: --merge: {exc}") from None
        report.save(args.out, result, text := table(result))
        print(text)
        return

    kernels = args.kernel or list(DEFAULT_SHAPES)
    try:
        specs = {name: registry.get(name) for name in kernels}
        dtype = dtype_from_name(args.dtype)
        shapes = report.shapes_by_kernel(args.shape, kernels)
        for name in kernels:
            if name not in shapes and name not in DEFAULT_SHAPES:
                raise ValueError(f"no built-in off-bucket shapes for {name}: pass --shape {name}=SPEC")
            shapes.setdefault(name, DEFAULT_SHAPES.get(name, []))
        todo = report.plan(kernels, [dtype], shapes)
        by_kernel = {name: [c.problem for c in todo.cases if c.spec.name == name] for name in kernels}
        for name, problems in by_kernel.items():  # every shape checked before the first search
            offbucket.runtime_choices(specs[name], problems, dtype)
    except (ValueError, registry.UnknownKernel) as exc:
        raise SystemExit(f"off_bucket.py: {exc}") from None

    result = {
        **environment.environment(),
        "timing": offbucket.TIMING_METHOD,
        "dtype": DTYPE_NAMES[dtype],
        "trials": args.trials,
        "timeout": args.timeout,
        "records": [],
    }
    workers = default_workers()
    done: list[dict] = []

    def save(records: list[dict]) -> None:
        """Write the report of every record so far (the finished kernels' and this kernel's)."""
        result["records"] = done + records
        result["summary"] = offbucket.summarize(result["records"])
        report.save(args.out, result, table(result))
        last = records[-1]
        phases = ", ".join(f"{k} {v:.1f}" for k, v in last.get("search_phases", {}).items())
        print(
            f"{last['kernel']} {last['shape']} done: search {last['search_seconds']:.0f} s ({phases}), final timing "
            f"{last.get('timing_seconds', 0):.0f} s",
            flush=True,
        )

    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(CompilePool(workers)) if workers > 1 else 0
        for name, problems in by_kernel.items():
            done += offbucket.measure_off_bucket(
                specs[name],
                problems,
                dtype,
                trials=args.trials,
                timeout=args.timeout,
                seed=args.seed,
                examples=args.examples,
                final_examples=args.final_examples,
                compile_workers=pool,
                on_record=save,
            )
    print(table(result))


if __name__ == "__main__":
    main()
