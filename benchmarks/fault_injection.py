"""Fault injection: isolated searches over a space whose configs raise, fail to build, compute wrong, hang,
kill their process and (on a GPU) write out of bounds, next to good configs of three speeds.

    python3 benchmarks/fault_injection.py --out $OUT/fault-injection-H100

Two searches of the whole grid (tests/fault_kernels.py): the worker compiling each config itself, then with
compile-ahead workers. Each must complete with every config recorded once, with the outcome its fault calls
for and a reason; store the fastest good config as the best; and leave this process without a CUDA context.
Writes PREFIX.json and PREFIX.md; exits 1 if any check fails. Runs on the CPU too (Triton interpreter,
without the out-of-bounds config).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import pathlib
import sys
import tempfile
import time

import torch
import triton
from tabulate import tabulate

import autotune.kernels.vector_add.add as vector_add
from autotune.db import ConfigStore
from autotune.engine import (
    isolation,
)  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune.engine.plan import SearchOptions
from autotune.engine.search import search

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from fault_kernels import EXPECTED, FAULT_ADD, MODES, ON_GPU  # noqa: E402


def run(problem: dict, workers: int, args: argparse.Namespace) -> dict:
    """One isolated search of the fault grid, its trials as stored, and the checks it passes or fails."""
    with tempfile.TemporaryDirectory() as tmp, ConfigStore(str(pathlib.Path(tmp) / "faults.sqlite")) as store:
        started = time.perf_counter()
        result = search(
            FAULT_ADD,
            problem,
            torch.float32,
            SearchOptions(
                sampler="grid",
                isolate=True,
                trial_timeout=args.trial_timeout,
                examples=args.examples,
                final_examples=args.final_examples,
            ),
            store=store,
            compile_workers=workers,
        )
        wall = time.perf_counter() - started
        stored = {json.loads(t.config_json)["mode"]: t for t in store.trials(kernel=FAULT_ADD.name)}
        best = [row.config for row in store.best_rows(kernel=FAULT_ADD.name)]
    trials = [
        {
            "number": t.number,
            "mode": t.config["mode"],
            "expected": EXPECTED[t.config["mode"]],
            "outcome": t.outcome,
            "stored": stored[t.config["mode"]].outcome if t.config["mode"] in stored else None,
            "time_ms": t.time_ms,
            "reason": t.reason,
        }
        for t in result.trials
    ]
    modes = sorted(t["mode"] for t in trials)
    checks = {
        "every config recorded once": modes == sorted(MODES),
        "every outcome as its fault calls for": all(t["outcome"] == t["expected"] for t in trials),
        "every failure has a reason": all(t["reason"] for t in trials if t["outcome"] != "ok"),
        "the database holds the same trials": all(t["stored"] == t["outcome"] for t in trials)
        and len(stored) == len(MODES),
        "the stored best is the fastest good config": best == [{"mode": "fast"}]
        and result.best_config == {"mode": "fast"},
        "baseline and final verification ran in the worker": result.baseline_ms is not None
        and result.examples_verified >= args.final_examples,
        "no CUDA context in this process": not torch.cuda.is_initialized(),
        "no evaluation worker left running": not [
            p for p in multiprocessing.active_children() if p.name == isolation.WORKER_NAME
        ],
    }
    return {
        "compile_workers": workers,
        "wall_s": round(wall, 1),
        "compiled_ahead": result.compiled_ahead,
        "seconds": {k: round(v, 2) for k, v in result.seconds.items()},
        "best_ms": result.best_ms,
        "default_ms": result.default_ms,
        "baseline_ms": result.baseline_ms,
        "examples_verified": result.examples_verified,
        "counts": result.counts(),
        "checks": checks,
        "trials": trials,
    }


def report(meta: dict, runs: list[dict]) -> str:
    text = (
        f"# Fault injection: {meta['gpu']} ({meta['device']})\n\n{meta['date']}; torch {meta['torch']}, "
        f"Triton {meta['triton']}; problem {json.dumps(meta['problem'])}, fp32; "
        f"trial limit {meta['trial_timeout']:g} s; "
        f"{meta['examples']} examples per trial, {meta['final_examples']} for the winner.\n"
    )
    for r in runs:
        text += (
            f"\n## compile-ahead workers: {r['compile_workers']}\n\n"
            f"{r['wall_s']} s; {r['compiled_ahead']} compiled ahead; "
            f"seconds by phase: {json.dumps(r['seconds'])}\n\n"
        )
        text += "\n".join(f"- {'PASS' if ok else 'FAIL'}: {name}" for name, ok in r["checks"].items()) + "\n\n"
        text += tabulate(r["trials"], headers="keys", tablefmt="github", floatfmt=".4g") + "\n"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="path prefix of the .json and .md reports")
    parser.add_argument("--shape", default="1048576" if ON_GPU else "1000")
    parser.add_argument("--trial-timeout", type=float, default=30.0 if ON_GPU else 5.0)
    parser.add_argument("--examples", type=int, default=20 if ON_GPU else 3)
    parser.add_argument("--final-examples", type=int, default=100 if ON_GPU else 10)
    parser.add_argument("--compile-workers", type=int, default=4 if ON_GPU else 2)
    args = parser.parse_args()
    problem = vector_add.parse_shape(args.shape)
    runs = [run(problem, workers, args) for workers in (0, args.compile_workers)]
    info = isolation.worker_gpu()
    meta = {
        "gpu": info.name,
        "device": info.device_name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "problem": problem,
        "trial_timeout": args.trial_timeout,
        "examples": args.examples,
        "final_examples": args.final_examples,
        "modes": list(MODES),
        "parent_cuda_initialized": torch.cuda.is_initialized(),
    }
    text = report(meta, runs)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(f"{out}.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1, default=str))
    pathlib.Path(f"{out}.md").write_text(text)
    print(text)
    sys.exit(0 if all(all(r["checks"].values()) for r in runs) else 1)


if __name__ == "__main__":
    main()
