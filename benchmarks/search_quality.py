"""Search quality: exhaustive grid against TPE (and random) on one kernel's space.

    python benchmarks/search_quality.py --kernel softmax --dtype bf16 --shape 4096x4096 --out benchmarks/results/NAME

1. Grid: every config the constraints allow on the problem is verified and timed once, on the GPU.
2. Replays: TPE and random studies (many seeds, warm-started from the default config as `autotune search`
   is) draw from the same space; each distinct config they ask for costs one evaluation and gets the
   time the grid measured for it. We count the evaluations each needs to come within 3% of the grid's
   best. Replaying measured times keeps measurement noise out of the sampler comparison.
"""

from __future__ import annotations

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
import argparse
import datetime
import json
import pathlib
import statistics
import time

import optuna
import torch
import triton

from autotune import gpu
from autotune.search import Evaluator, make_sampler
from autotune.precompile import CompilePool
from autotune.spec import DTYPE_NAMES, dtype_from_name

WITHIN = 1.03


def grid_times(spec, problem, dtype, examples: int, workers: int) -> tuple[dict[str, dict], float]:
    evaluator = Evaluator(spec, problem, dtype, examples=examples, seed=0, max_numel=1 << 20)
    evaluator.timing = {"warmup_ms": 10, "rep_ms": 50, "max_reps": 200}
    evaluator(dict(spec.space.default))  # draws the Hypothesis problems every config will be checked on
    valid = spec.space.grid_for(problem)
    start = time.perf_counter()
    if workers > 1:
        with CompilePool(workers) as pool:
            built = pool.compile(spec, evaluator.problems_run, dtype, valid)
        print(f"  compiled {built} of {len(valid)} configs for {len(evaluator.problems_run)} problems in "
              f"{time.perf_counter() - start:.0f} s with {workers} processes", flush=True)
    start = time.perf_counter()
    table = {}
    for config in spec.space.grid():
        outcome = evaluator(config)
        table[json.dumps(config, sort_keys=True)] = {"outcome": outcome.outcome, "time_ms": outcome.time_ms, "reason": outcome.reason}
    return table, time.perf_counter() - start


def evaluations_to_target(spec, problem, table: dict[str, dict], sampler_name: str, seed: int, target: float, budget: int) -> int | None:
    """Distinct valid configs a study evaluates until one is within target; None if never within budget."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=make_sampler(sampler_name, spec, seed), direction="minimize")
    study.enqueue_trial(dict(spec.space.default))
    seen: set[str] = set()
    hit: list[int] = []

    def objective(trial):
        key = json.dumps(spec.space.suggest(trial, problem), sort_keys=True)
        entry = table[key]
        if entry["outcome"] != "invalid":  # invalid configs are rejected before compiling: free
            seen.add(key)
        if entry["outcome"] != "ok":
            raise optuna.TrialPruned()
        if entry["time_ms"] <= target and not hit:
            hit.append(len(seen))
            study.stop()
        return entry["time_ms"]

    for _ in range(budget * 20):  # duplicates and invalid configs cost nothing; bound the loop anyway
        study.optimize(objective, n_trials=1)
        if hit or len(seen) >= budget:
            break
    return hit[0] if hit else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default="softmax")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--shape", action="append", required=True)
    parser.add_argument("--examples", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=12, help="processes compiling ahead")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    spec = autotune.get(args.kernel)
    dtype = dtype_from_name(args.dtype)
    info = gpu.current_gpu()
    report = {"gpu": info.name, "device_name": info.device_name, "torch": torch.__version__, "triton": triton.__version__,
              "optuna": optuna.__version__, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "kernel": spec.name, "dtype": DTYPE_NAMES[dtype], "within": WITHIN, "shapes": []}
    for shape in args.shape:
        problem = spec.parse_shape(shape)
        table, seconds = grid_times(spec, problem, dtype, args.examples, args.workers)
        ok = {k: v["time_ms"] for k, v in table.items() if v["outcome"] == "ok"}
        evaluated = sum(1 for v in table.values() if v["outcome"] != "invalid")
        best_key = min(ok, key=ok.get)
        target = ok[best_key] * WITHIN
        entry = {"shape": shape, "grid_evaluations": evaluated, "grid_ok": len(ok), "grid_seconds": seconds,
                 "grid_best_ms": ok[best_key], "grid_best_config": json.loads(best_key),
                 "default_ms": table[json.dumps(dict(spec.space.default), sort_keys=True)]["time_ms"],
                 "outcomes": {o: sum(1 for v in table.values() if v["outcome"] == o) for o in {v["outcome"] for v in table.values()}}}
        for sampler_name in ("tpe", "random"):
            runs = [evaluations_to_target(spec, problem, table, sampler_name, seed, target, evaluated) for seed in range(args.seeds)]
            reached = [r for r in runs if r is not None]
            entry[sampler_name] = {
                "evaluations": runs,
                "median": statistics.median(reached) if reached else None,
                "max": max(reached) if reached else None,
                "median_fraction_of_grid": statistics.median(reached) / evaluated if reached else None,
                "reached": f"{len(reached)}/{len(runs)}",
            }
        report["shapes"].append(entry)
        pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.out).with_suffix(".json").write_text(json.dumps(report, indent=1))  # each shape as it lands
        t, r = entry["tpe"], entry["random"]
        print(f"{spec.name} {DTYPE_NAMES[dtype]} {shape}: grid {evaluated} evaluations ({seconds:.0f} s), best {ok[best_key]:.4g} ms "
              f"{json.loads(best_key)}; TPE median {t['median']} evals ({100 * (t['median_fraction_of_grid'] or 0):.1f}% of grid, "
              f"max {t['max']}, reached {t['reached']}); random median {r['median']} ({100 * (r['median_fraction_of_grid'] or 0):.1f}%)",
              flush=True)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
