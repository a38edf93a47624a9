"""Search quality: how many evaluations each sampler needs to come within 3% of the best known config.

    python benchmarks/search_quality.py --kernel softmax --dtype bf16 --shape 4096x4096 --out benchmarks/results/NAME
    python benchmarks/search_quality.py --kernel matmul --dtype bf16 --gate timed --shape 256x4096x4096 \\
        --live-shape 4096x4096x4096 --samplers tpe,gp,random --table T.json --seconds 480 --out NAME

1. Grid shapes (`--shape`): every config the constraints allow is verified and timed once, on the GPU; the
   best of them is the best known config. Samplers (several seeds, each study warm-started from the
   default config as `autotune search` is) then replay the space: each distinct config a study asks for
   costs one evaluation and gets the time the grid measured. Replaying measured times keeps measurement
   noise out of the sampler comparison.
2. Live shapes (`--live-shape`), whose grids are too large to measure: the studies run against one shared
   table, each config measured the first time any study asks for it; the best known config is the best
   any study found.

Studies ask `--batch` configs at a time (new ones compile ahead in worker processes, as `autotune search`
does; GP, which has no constant liar, one at a time). The table of measured configs is saved as it grows
(`--table`): with `--seconds`, a run stops measuring when the time is up and a second run with the same
table continues where it stopped, so a large grid can be measured over several sessions; `--replay-only`
replays the samplers on the measured grids without a GPU. `--gate full` checks each config on the timed
problem, the bucket's edge cases and Hypothesis draws; `--gate timed` only on the timed problem, and the
best config is then fully verified before it is reported (a failure moves the title to the next best).
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import statistics
import sys
import time
from collections.abc import Callable

import optuna
import torch
import triton

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune import gpu
from autotune.engine.evaluate import COMPILE_ERRORS, Evaluator
from autotune.engine.plan import make_sampler
from autotune.engine.precompile import CompilePool
from autotune.gate.compare import outputs_like
from autotune.gate.verify import check_problem, verify
from autotune.measure import bench
from autotune.spec import DTYPE_NAMES, dtype_from_name

WITHIN = 1.03
LOOP_CAP = 10
"""Trials per evaluation a study may ask before it is stopped: rejected configs and repeats cost no GPU
time, but a converged sampler only repeats itself (and a GP's time per ask grows with its trials)."""


def key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


class Table:
    """Measured configs per shape ({"outcome", "time_ms", "reason"}), saved to a JSON file as it grows."""

    def __init__(self, path: pathlib.Path | None, header: dict) -> None:
        self.path, self.header = path, header
        self.shapes: dict[str, dict[str, dict]] = {}
        if path and path.exists():
            saved = json.loads(path.read_text())
            if {k: saved.get(k) for k in header} == header:
                self.shapes = saved["shapes"]
            else:
                print(
                    f"note: {path} was measured for { ({k: saved.get(k) for k in header}) }, "
                    f"not {header}: starting over",
                    file=sys.stderr,
                )

    def of(self, shape: str) -> dict[str, dict]:
        return self.shapes.setdefault(shape, {})

    def save(self) -> None:
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({**self.header, "shapes": self.shapes}))


class Measurer:
    """Verifies and times configs on one problem, filling the table; compiles batches ahead. Without a
    deadline left (or with `measuring` off) it only reads the table."""

    def __init__(
        self,
        spec,
        problem,
        dtype,
        gate: str,
        examples: int,
        pool: CompilePool | None,
        table: dict,
        deadline: float | None,
        measuring: bool = True,
    ) -> None:
        self.spec, self.dtype, self.gate, self.pool, self.table, self.deadline = (
            spec,
            dtype,
            gate,
            pool,
            table,
            deadline,
        )
        self.examples, self.measuring = examples, measuring
        self.problem = spec.problem_for(problem, dtype)
        self._evaluator: Evaluator | None = None
        self.stopped = False

    @property
    def evaluator(self) -> Evaluator:
        """The inputs, references and gate of the timed problem, made on first use (on the device)."""
        if self._evaluator is None:
            self._evaluator = Evaluator(
                self.spec, self.problem, self.dtype, examples=self.examples, seed=0, max_numel=1 << 20
            )
            self._evaluator.timing = {"warmup_ms": 10, "rep_ms": 50, "max_reps": 200}
            inputs, base, _ = self._evaluator.references.get(self.spec, self.problem, self.dtype, 0)
            self._inputs, self._out = inputs, outputs_like(base, None)
        return self._evaluator

    def out_of_time(self) -> bool:
        expired = self.deadline is not None and time.monotonic() > self.deadline
        self.stopped = self.stopped or expired or not self.measuring
        return self.stopped

    def measure(self, configs: list[dict]) -> bool:
        """Measure the configs not in the table yet (compiled ahead together); whether all are there now."""
        fresh = list({key(c): c for c in configs if key(c) not in self.table}.values())
        for config in fresh:  # rejected before compiling: known without the GPU
            reason = self.spec.space.rejects(config, self.problem)
            if reason:
                self.table[key(config)] = {"outcome": "invalid", "time_ms": None, "reason": reason}
        fresh = [c for c in fresh if key(c) not in self.table]
        if not fresh:
            return True
        if self.out_of_time():
            return False
        if self.pool:
            problems = [self.problem] if self.gate == "timed" else self.evaluator.problems_run
            self.pool.compile(self.spec, problems, self.dtype, fresh)
        for config in fresh:
            if self.out_of_time():
                return False
            self.table[key(config)] = self._one(config)
        return True

    def _one(self, config: dict) -> dict:
        if self.gate == "full":
            o = self.evaluator(config)
            return {"outcome": o.outcome, "time_ms": o.time_ms, "reason": o.reason}
        failure = check_problem(self.spec, config, self.problem, self.dtype, cache=self.evaluator.references)
        if failure is not None:
            kind = "compile_error" if failure.reason.startswith(COMPILE_ERRORS) else failure.kind
            return {"outcome": kind, "time_ms": None, "reason": failure.reason}
        ms = bench.time_ms(lambda: self.spec.launch(self._inputs, config, self._out), **self.evaluator.timing)
        return {"outcome": "ok", "time_ms": ms, "reason": None}

    def best(self) -> tuple[str | None, float | None]:
        """The fastest config of the table that passes the full gate. With `--gate timed` it is verified now
        (one that fails is marked incorrect and the next is tried); without measuring, the fastest verified
        one, else the fastest."""
        ok = sorted(((k, e) for k, e in self.table.items() if e["outcome"] == "ok"), key=lambda ke: ke[1]["time_ms"])
        for k, entry in ok:
            if self.gate == "timed" and not entry.get("verified"):
                if not self.measuring:
                    continue
                result = verify(self.spec, json.loads(k), self.dtype, examples=20, extra_problems=self.evaluator.edges)
                if not result.passed:
                    entry.update(
                        outcome="incorrect", reason=result.failure.describe() if result.failure else "no examples"
                    )
                    continue
                entry["verified"] = True
            return k, entry["time_ms"]
        return (ok[0][0], ok[0][1]["time_ms"]) if ok and not self.measuring else (None, None)


def run_studies(
    measurer: Measurer,
    samplers: list[str],
    seeds: int,
    budget: int,
    batch: int,
    target: float | None = None,
    saved: Callable[[], None] | None = None,
) -> dict[str, list]:
    """For each sampler and seed, the times of the distinct valid configs its study evaluated, in order,
    until it evaluated `budget` or (where the best is known) came within `target`. All studies advance
    together, a batch of asks each per round, so new configs compile ahead at once; `saved()`, if given,
    is called after each round's measurements (a run killed mid-shape keeps them)."""
    spec, problem, table = measurer.spec, measurer.problem, measurer.table
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # not a line per GP fallback to independent sampling
    runs = {}
    for name in samplers:
        for seed in range(seeds):
            study = optuna.create_study(sampler=make_sampler(name, seed), direction="minimize")
            study.enqueue_trial(dict(spec.space.default))
            # GP has no constant liar: the asks of one batch would all get its one best proposal.
            runs[(name, seed)] = {
                "study": study,
                "seen": [],
                "times": [],
                "asked": 0,
                "batch": 1 if name == "gp" else batch,
            }
    active = list(runs.values())
    complete = True
    while active and complete:
        asked = []
        for run in active:
            trials = [run["study"].ask() for _ in range(run["batch"])]
            run["asked"] += run["batch"]
            asked.append((run, [(t, spec.space.suggest(t, problem)) for t in trials]))
        complete = measurer.measure([c for _, pairs in asked for _, c in pairs])
        if saved:
            saved()
        for run, pairs in asked:
            for trial, config in pairs:
                entry = table.get(key(config))
                if entry is None:  # out of time before it was measured
                    run["study"].tell(trial, state=optuna.trial.TrialState.FAIL)
                    continue
                if entry["outcome"] != "invalid" and key(config) not in run["seen"]:
                    run["seen"].append(key(config))
                    run["times"].append(entry["time_ms"])
                if entry["outcome"] == "ok":
                    run["study"].tell(trial, entry["time_ms"])
                else:
                    run["study"].tell(trial, state=optuna.trial.TrialState.PRUNED)
        active = [
            r
            for r in active
            if len(r["seen"]) < budget
            and r["asked"] < budget * LOOP_CAP
            and not (target and evaluations_to_target(r["times"], target))
        ]
    return {f"{name}:{seed}": run["times"] for (name, seed), run in runs.items()}


def evaluations_to_target(times: list, target: float) -> int | None:
    """1-based position of the first evaluation within target; None if none is."""
    return next((i + 1 for i, t in enumerate(times) if t is not None and t <= target), None)


def summarize(runs: dict[str, list], samplers: list[str], target: float, grid: int | None) -> dict:
    out = {}
    for name in samplers:
        hits = [evaluations_to_target(times, target) for run, times in runs.items() if run.split(":")[0] == name]
        reached = [h for h in hits if h is not None]
        median = statistics.median(reached) if reached else None
        out[name] = {
            "evaluations": hits,
            "median": median,
            "max": max(reached) if reached else None,
            "reached": f"{len(reached)}/{len(hits)}",
            "median_fraction_of_grid": median / grid if grid and median else None,
        }
    return out


def one_shape(args, spec, dtype, shape: str, grid_mode: bool, table: Table, pool, deadline) -> dict:
    problem = spec.problem_for(spec.parse_shape(shape), dtype)
    valid = spec.space.grid_for(problem)
    measurer = Measurer(
        spec, problem, dtype, args.gate, args.examples, pool, table.of(shape), deadline, measuring=not args.replay_only
    )
    started = time.perf_counter()
    if grid_mode and not args.replay_only:
        for i in range(0, len(valid), args.grid_batch):
            measurer.measure(valid[i : i + args.grid_batch])
            table.save()
            if measurer.stopped:
                break
    measurer.measure([dict(spec.space.default)])  # the default's time, for the report
    complete = grid_mode and all(key(c) in measurer.table for c in valid)
    runs = {}
    if complete:  # the best is known: each study runs until it comes within 3% of it
        best_ms = measurer.best()[1]
        if best_ms:
            runs = run_studies(
                measurer, args.samplers, args.seeds, min(len(valid), args.replay_cap), args.batch, best_ms * WITHIN
            )
    elif not grid_mode:
        runs = run_studies(measurer, args.samplers, args.seeds, args.budget, args.batch, saved=table.save)
    best_key, best_ms = measurer.best()
    table.save()
    measured = sum(1 for c in valid if key(c) in measurer.table)
    entry = {
        "shape": shape,
        "mode": "grid" if grid_mode else "live",
        "valid_configs": len(valid),
        "measured": measured,
        "complete": complete if grid_mode else not measurer.stopped,
        "seconds": time.perf_counter() - started,
        "best_ms": best_ms,
        "best_config": json.loads(best_key) if best_key else None,
        "default_ms": measurer.table.get(key(dict(spec.space.default)), {}).get("time_ms"),
        "outcomes": {
            o: sum(1 for e in measurer.table.values() if e["outcome"] == o)
            for o in {e["outcome"] for e in measurer.table.values()}
        },
    }
    if best_ms and runs:
        entry["samplers"] = summarize(runs, args.samplers, best_ms * WITHIN, len(valid) if grid_mode else None)
        entry["runs"] = runs
    return entry


def describe(entry: dict, spec_name: str, dtype_name: str) -> str:
    head = (
        f"{spec_name} {dtype_name} {entry['shape']} ({entry['mode']}): {entry['valid_configs']} valid configs, "
        f"{entry['measured']} measured{'' if entry['complete'] else ' (incomplete: run again with the same --table)'}"
    )
    if not entry.get("samplers"):
        return head
    parts = [
        f"{name} median {s['median']} evals"
        + (f" ({100 * s['median_fraction_of_grid']:.1f}% of grid)" if s["median_fraction_of_grid"] else "")
        + f", max {s['max']}, reached {s['reached']}"
        for name, s in entry["samplers"].items()
    ]
    return f"{head}; best {entry['best_ms']:.4g} ms {entry['best_config']}; " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default="softmax")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--shape", action="append", default=[], help="grid shape: every valid config measured")
    parser.add_argument("--live-shape", action="append", default=[], help="shape measured only where studies ask")
    parser.add_argument("--samplers", default="tpe,random", help="comma-separated: tpe, gp, random")
    parser.add_argument("--gate", choices=["full", "timed"], default="full")
    parser.add_argument("--examples", type=int, default=5, help="Hypothesis problems per config with --gate full")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=60, help="evaluations per study on a live shape")
    parser.add_argument("--replay-cap", type=int, default=100000, help="evaluations per study replaying a grid")
    parser.add_argument("--batch", type=int, default=8, help="configs a study asks per round")
    parser.add_argument("--grid-batch", type=int, default=96, help="grid configs compiled ahead at once")
    parser.add_argument("--workers", type=int, default=12, help="processes compiling ahead (0: none)")
    parser.add_argument(
        "--seconds", type=float, help="stop measuring after this long (the table keeps what was measured)"
    )
    parser.add_argument("--table", help="JSON file of measured configs, read first and saved as it grows")
    parser.add_argument(
        "--replay-only",
        action="store_true",
        help="measure nothing: replay the samplers on the grids of --table (no GPU needed)",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    args.samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
    if not args.shape and not args.live_shape:
        parser.error("give at least one --shape or --live-shape")
    spec = autotune.get(args.kernel)
    dtype = dtype_from_name(args.dtype)
    info = gpu.current_gpu()
    deadline = time.monotonic() + args.seconds if args.seconds else None
    table_path = pathlib.Path(args.table) if args.table else None
    gpu_name, device_name = info.name, info.device_name
    if args.replay_only and table_path and table_path.exists():  # the times are the table's GPU's, not this machine's
        gpu_name = device_name = json.loads(table_path.read_text()).get("gpu", gpu_name)
    table = Table(
        table_path,
        {
            "kernel": spec.name,
            "source_hash": spec.source_hash,
            "dtype": DTYPE_NAMES[dtype],
            "gpu": gpu_name,
            "gate": args.gate,
        },
    )
    report = {
        "gpu": gpu_name,
        "device_name": device_name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "optuna": optuna.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kernel": spec.name,
        "dtype": DTYPE_NAMES[dtype],
        "within": WITHIN,
        "gate": args.gate,
        "shapes": [],
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pool = CompilePool(args.workers) if args.workers > 1 and not info.is_interpreter else None
    try:
        for shape, grid_mode in [(s, True) for s in args.shape] + [(s, False) for s in args.live_shape]:
            entry = one_shape(args, spec, dtype, shape, grid_mode, table, pool, deadline)
            report["shapes"].append(entry)
            out.with_suffix(".json").write_text(json.dumps(report, indent=1))  # each shape as it lands
            print(describe(entry, spec.name, DTYPE_NAMES[dtype]), flush=True)
    finally:
        if pool:
            pool.close()
    out.with_suffix(".md").write_text(
        "\n\n".join(describe(e, spec.name, DTYPE_NAMES[dtype]) for e in report["shapes"]) + "\n"
    )
    if any(not e["complete"] for e in report["shapes"]):
        sys.exit(3)


if __name__ == "__main__":
    main()
