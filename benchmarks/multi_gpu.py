"""Time to spend one fixed search budget with 1 and with 2 GPUs (and with the one-process search).

    python benchmarks/multi_gpu.py --kernel softmax --dtype bf16 --shape 4096x4096 --trials 60
        --out benchmarks/results/NAME

Each run starts from an empty Optuna storage, an empty config database and an empty Triton kernel cache
(TRITON_CACHE_DIR, which the worker processes inherit), so no run warm-starts from another's searches or
compiles. "search" is `autotune search` without workers (one process, compile-ahead pool); "gpus=N" is
`autotune search --gpus 0,..,N-1` (one worker process per GPU on a shared journal-file study).
Writes NAME.json and NAME.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import tempfile
import time

import optuna
import torch
import triton

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune import gpu
from autotune.db import ConfigStore
from autotune.engine.distributed import search_parallel
from autotune.engine.plan import SearchOptions
from autotune.engine.precompile import default_workers
from autotune.engine.search import search
from autotune.spec import dtype_from_name


def run(label: str, spec, jobs, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp, ConfigStore(f"{tmp}/db.sqlite") as store:
        os.environ["TRITON_CACHE_DIR"] = f"{tmp}/triton-cache"  # compiled by this run alone
        started = time.perf_counter()
        if label == "search":
            results = [
                search(
                    spec,
                    problem,
                    dtype,
                    SearchOptions(trials=args.trials, sampler=args.sampler, seed=args.seed, examples=args.examples),
                    store=store,
                    compile_workers=default_workers(),
                )
                for problem, dtype in jobs
            ]
        else:
            n = int(label.split("=")[1])
            results = search_parallel(
                spec,
                jobs,
                SearchOptions(trials=args.trials, sampler=args.sampler, seed=args.seed, examples=args.examples),
                gpus=list(range(n)),
                store=store,
            )
        seconds = time.perf_counter() - started
    studies = [
        {
            "bucket": r.bucket,
            "dtype": r.dtype,
            "evaluations": r.evaluations,
            "trials": len(r.trials),
            "best_ms": r.best_ms,
            "best_config": r.best_config,
            "seconds": r.seconds,
        }
        for r in results
    ]
    evaluations = sum(s["evaluations"] for s in studies)
    print(f"{label}: {seconds:.1f} s for {evaluations} evaluations", flush=True)
    return {"label": label, "seconds": seconds, "evaluations": evaluations, "studies": studies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default="softmax")
    parser.add_argument("--dtype", action="append", default=[])
    parser.add_argument("--shape", action="append", default=[])
    parser.add_argument("--trials", type=int, default=60, help="evaluations per study (the fixed budget)")
    parser.add_argument("--sampler", default="tpe")
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gpus", type=int, default=2, help="largest GPU count to time (1..this)")
    parser.add_argument(
        "--runs",
        default="",
        help="comma-separated runs to time, of search, gpus=1, .., gpus=N (default: all of them, in that order)",
    )
    parser.add_argument("--out", required=True, help="output path without extension")
    args = parser.parse_args()

    spec = autotune.get(args.kernel)
    problems = [spec.parse_shape(s) for s in args.shape] or list(spec.presets_here())
    dtypes = [dtype_from_name(d) for d in args.dtype] or list(spec.dtypes)
    jobs = [(p, d) for d in dtypes for p in problems]
    available = torch.cuda.device_count()
    if available < args.gpus:
        raise SystemExit(f"--gpus {args.gpus} asked for, but this machine has {available} GPU(s)")
    labels = args.runs.split(",") if args.runs else ["search", *(f"gpus={n}" for n in range(1, args.gpus + 1))]
    runs = []
    for label in labels:
        runs.append(run(label, spec, jobs, args))
        write_report(runs, spec, jobs, available, args)  # after each run, so a cut-off call keeps what finished


def write_report(runs: list[dict], spec, jobs, available: int, args) -> None:
    info = gpu.current_gpu()
    report = {
        "gpu": info.name,
        "device": info.device_name,
        "gpus_available": available,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"torch": torch.__version__, "triton": triton.__version__, "optuna": optuna.__version__},
        "kernel": spec.name,
        "trials": args.trials,
        "sampler": args.sampler,
        "examples": args.examples,
        "jobs": [{"problem": p, "dtype": str(d)} for p, d in jobs],
        "runs": runs,
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str))
    base = next((r["seconds"] for r in runs if r["label"] == "gpus=1"), None)
    lines = [
        f"# {spec.name}: {args.trials} evaluations per study, {len(jobs)} studies, "
        f"on {info.device_name} ({report['date']})",
        "",
        "| run | seconds | evaluations | evaluations/s | speedup vs gpus=1 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        speedup = f"{base / r['seconds']:.2f}" if base else "-"
        lines.append(
            f"| {r['label']} | {r['seconds']:.1f} | {r['evaluations']} | "
            f"{r['evaluations'] / r['seconds']:.2f} | {speedup} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
