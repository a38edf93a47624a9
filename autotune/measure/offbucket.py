"""Nearest-bucket quality: on a shape no stored row was tuned on, how close the config the runtime launches
comes to a search of that exact shape. Both configs are timed in one process, on the same random inputs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

from autotune import gpu, runtime
from autotune.db import ConfigStore, masked_url
from autotune.engine.isolation import shared_workers
from autotune.engine.plan import SearchOptions
from autotune.engine.precompile import CompilePool
from autotune.engine.search import search
from autotune.gate.compare import fresh_outputs
from autotune.gate.verify import ReferenceCache, check_problem
from autotune.measure import bench
from autotune.measure.bench import require_nonzero
from autotune.space import Config, Problem
from autotune.spec import DTYPE_NAMES, KernelSpec, shape_label

GOAL = 1.10
"""Issue 7: off-bucket shapes within 10% of the exactly tuned time on average (the mean of runtime ms / exact ms)."""
TIMING_TOLERANCE = 0.25
"""A record whose exact config's final time is further than this from the search's own time of it is left out of
the summary: the machine's timings moved between the search and the final timing (seen on 2026-11-24: 1.4-3.4x).
Where the final times are GPU times (`NAME_gpu_ms`), only a final time this far above the search's counts: searches
before 2026-11-25 (afa2266) timed with do_bench, which times a call by its host where its host path outlasts the L2
clear, so their times can lie above a CUDA graph's, never below."""
ROUNDS = 3
"""Timings of each config, taken in turn; a config's time is the median of its rounds, so drift hits all alike."""
TIMING = {"warmup_ms": 25.0, "rep_ms": 100.0, "max_reps": 500}
"""bench.time_ms per round: capped repetitions keep a 10 us kernel from costing seconds of L2 clears."""
TIMING_METHOD = (
    f"each config timed in {ROUNDS} rounds, the configs in turn, on the same inputs; a config's time "
    "is the median of its rounds' medians of triton.testing.do_bench (L2 cleared before each call; "
    "wall-clock under the interpreter) or, where the record was timed by CUDA graph, of its calls "
    "replayed from a graph"
)
"""How `measure_off_bucket` times, for its reports (every run since the first, 2026-11-23, timed this way; the CUDA
graph times since 2026-11-25)."""


def runtime_choices(
    spec: KernelSpec, problems: Sequence[Problem], dtype: torch.dtype
) -> list[tuple[runtime.Choice, Problem | None]]:
    """The runtime's choice for each problem (read afresh from the databases it reads) and the problem its row was
    timed on (None for the default). TypeError/ValueError for a kernel, dtype or problem that cannot be measured:
    one the default config cannot run, or one a stored row was tuned on (it is not off-bucket)."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"spec must be a KernelSpec, got {type(spec).__name__}")
    if dtype not in spec.dtypes:
        raise ValueError(f"dtype {dtype} is not supported by {spec.name}; expected one of {spec.dtypes}")
    if not problems:
        raise ValueError(f"problems for {spec.name}: expected at least one off-bucket problem")
    table = runtime.tuned(spec)
    table.clear()  # read the databases as they are now
    choices = []
    for problem in problems:
        problem = spec.problem_for(problem, dtype)
        reason = spec.space.rejects(spec.space.default, problem)
        if reason:
            raise ValueError(f"{spec.name}: the default config cannot run {shape_label(problem)}: {reason}")
        choice = table.resolve(dtype, spec.bucket(problem), problem)
        tuned_on = _stored_problem(spec, choice, dtype)
        if tuned_on == problem:
            raise ValueError(
                f"{spec.name} {shape_label(problem)}: the stored row of bucket {choice.bucket} was tuned on "
                "this very problem; expected an off-bucket shape"
            )
        choices.append((choice, tuned_on))
    return choices


def measure_off_bucket(
    spec: KernelSpec,
    problems: Sequence[Problem],
    dtype: torch.dtype,
    *,
    trials: int = 30,
    timeout: float | None = None,
    seed: int = 0,
    examples: int = 20,
    final_examples: int = 100,
    compile_workers: int | CompilePool = 0,
    on_record: Callable[[list[dict]], object] | None = None,
) -> list[dict]:
    """One record per problem: the runtime's config (exact bucket, nearest or default, see `runtime_choices`) and
    the best of a fresh search of that exact problem (`trials` evaluations, `timeout` seconds; stored nowhere) that
    tries the runtime's config first, each timed on the same inputs (`_time_configs`), and ratio = runtime ms /
    exact ms (above 1: the exact search found a faster config; below 1 only by timing noise, or where the runtime's
    config failed the exact search's gate). A runtime config that computes the problem wrong gets no ratio.
    Every problem is checked before the first search; `on_record` gets the records so far after each problem (a
    run cut short keeps the shapes it finished)."""
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout}")
    choices = runtime_choices(spec, problems, dtype)
    records = []
    with shared_workers():  # where searches are isolated, one evaluation worker serves them all
        for problem, (choice, tuned_on) in zip((spec.problem_for(p, dtype) for p in problems), choices):
            started = time.perf_counter()
            result = search(
                spec,
                problem,
                dtype,
                SearchOptions(
                    trials=trials,
                    timeout=timeout,
                    seed=seed,
                    examples=examples,
                    final_examples=final_examples,
                    warm_start=[choice.config],
                ),
                compile_workers=compile_workers,
            )
            record = {
                "kernel": spec.name,
                "dtype": DTYPE_NAMES[dtype],
                "shape": shape_label(problem),
                "problem": problem,
                "bucket": spec.bucket(problem),
                "source": choice.source,
                "tuned_for": choice.bucket,
                "tuned_on": None if tuned_on is None else shape_label(tuned_on),
                "database": choice.database and masked_url(choice.database),
                "runtime_config": choice.config,
                "exact_config": result.best_config,
                "same_config": choice.config == result.best_config,
                "evaluations": result.evaluations,
                "runtime_config_searched": any(t.config == choice.config for t in result.trials),
                "search_seconds": time.perf_counter() - started,
                "search_phases": result.seconds,
                "search_best_ms": result.best_ms,
                "interpreter": gpu.interpreter_active(),
            }
            records.append(record)
            if result.best_config is None:
                record.update(ratio=None, error="the exact search found no verified config")
            else:
                timed = time.perf_counter()
                failure = _time_configs(
                    spec,
                    problem,
                    dtype,
                    seed,
                    record,
                    runtime=choice.config,
                    exact=result.best_config,
                    default=dict(spec.space.default),
                )
                record["timing_seconds"] = time.perf_counter() - timed
                record["runtime_failure"] = failure
                record["ratio"] = None if failure else config_ms(record, "runtime") / config_ms(record, "exact")
            if on_record is not None:
                on_record(records)
    return records


def left_out(record: dict) -> str | None:
    """Why a record's ratio says nothing about the runtime's choice, or None: an exact search that evaluated no
    config but the runtime's, or GPU timings that moved from the search's own (TIMING_TOLERANCE; the interpreter's
    wall-clock timings always do)."""
    if record.get("ratio") is None:
        return None
    if record["evaluations"] <= 1 and record["same_config"]:
        return "the exact search evaluated only the runtime's config"
    drift = config_ms(record, "exact") / record["search_best_ms"] - 1 if record.get("search_best_ms") else 0.0
    if "exact_gpu_ms" in record:
        drift = max(drift, 0.0)
    if abs(drift) > TIMING_TOLERANCE and not record.get("interpreter"):
        return f"unstable timing: the exact config's final time is {drift:+.0%} off its search time"
    return None


def summarize(records: Sequence[dict]) -> dict:
    """Per kernel and overall: shapes with a ratio, their mean, geometric mean and worst, how many the exact search
    did not beat (ratio < 1); the records without a ratio or left out (`left_out`); and whether the overall mean
    is within GOAL."""
    reasons = [left_out(r) for r in records]
    by_kernel: dict[str, list[float]] = {}
    for r, reason in zip(records, reasons):
        if r.get("ratio") is not None and reason is None:
            by_kernel.setdefault(r["kernel"], []).append(r["ratio"])
    ratios = [x for xs in by_kernel.values() for x in xs]
    overall = _stats(ratios) if ratios else None
    return {
        "goal": GOAL,
        "kernels": {k: _stats(xs) for k, xs in by_kernel.items()},
        "overall": overall,
        "unmeasured": sum(r.get("ratio") is None for r in records),
        "left_out": sum(reason is not None for reason in reasons),
        "goal_met": overall is not None and overall["mean"] <= GOAL,
    }


RUN_FIELDS = ("date", "trials", "timeout", "torch", "triton")
"""What each run of a merged result keeps of its own: records of different runs differ in these."""


def merge(results: Sequence[dict]) -> dict:
    """Several runs' results (each as `benchmarks/off_bucket.py` saves it) as one, in the order given: a later
    run's record of a kernel, dtype and shape replaces an earlier run's, which is kept under "superseded". Each
    record says which run it came from ("run": an index into "runs"); the summary covers the records kept. A merged
    result merges again as the runs it was made of. ValueError for no results, or results measured on different
    GPUs."""
    if not results:
        raise ValueError("results: expected at least one off-bucket result to merge")
    gpus = {r.get("gpu") for r in results}
    if len(gpus) != 1:
        raise ValueError(f"results were measured on different GPUs {sorted(map(str, gpus))}; expected one")
    kept: dict[tuple, dict] = {}
    runs: list[dict] = []
    superseded = []
    for result in results:
        first = len(runs)  # this result's run numbers start here
        runs += result["runs"] if "runs" in result else [{k: result.get(k) for k in RUN_FIELDS}]
        superseded += [{**r, "run": first + r["run"]} for r in result.get("superseded", [])]
        for record in result["records"]:
            record = {**record, "dtype": record.get("dtype", result.get("dtype")), "run": first + record.get("run", 0)}
            key = (record["kernel"], record["dtype"], record["shape"])
            if key in kept:
                superseded.append(kept[key])
            kept[key] = record
    last = results[-1]
    return {
        **{k: v for k, v in last.items() if k not in ("records", "summary", "superseded", "runs")},
        "runs": runs,
        "records": list(kept.values()),
        "superseded": superseded,
        "summary": summarize(list(kept.values())),
    }


def config_ms(record: dict, name: str) -> float | None:
    """A config's time in a record ("runtime", "exact" or "default"): its GPU time (CUDA graph) where one was
    taken, else its do_bench time; None where it was not timed."""
    return record.get(f"{name}_gpu_ms") or record.get(f"{name}_ms")


def _stats(ratios: list[float]) -> dict:
    return {
        "shapes": len(ratios),
        "mean": statistics.fmean(ratios),
        "geomean": statistics.geometric_mean(ratios),
        "worst": max(ratios),
        "exact_slower": sum(x < 1 for x in ratios),
    }


def _stored_problem(spec: KernelSpec, choice: runtime.Choice, dtype: torch.dtype) -> Problem | None:
    """The problem the row the runtime took was timed on."""
    if choice.database is None:
        return None
    with ConfigStore(choice.database, readonly=True) as store:
        rows = spec.current_rows(
            store.best_rows(
                kernel=spec.name, gpu=gpu.current_gpu().name, dtype=DTYPE_NAMES[dtype], source_hash=spec.current_hashes
            )
        )
    return next((row.problem for row in rows if row.bucket == choice.bucket and not row.flagged), None)


def _time_configs(
    spec: KernelSpec, problem: Problem, dtype: torch.dtype, seed: int, record: dict, **configs: Config
) -> str | None:
    """NAME_ms in record for each config, timed in turn on one set of inputs (do_bench: host and GPU), and on a GPU
    NAME_gpu_ms, each call replayed from a CUDA graph (the GPU's time alone: a small kernel whose host path
    outlasts do_bench's L2 clear is otherwise timed by its host, which moves 2-4x between runs). The runtime's
    config is checked on them first (the exact search's best was verified on this problem): one that computes
    it wrong is not timed, and why is returned."""
    cache = ReferenceCache()
    failure = check_problem(spec, configs["runtime"], problem, dtype, seed=seed, cache=cache)
    if failure is not None:
        del configs["runtime"]
    inputs, base, _ = cache.get(spec, problem, dtype, seed)
    require_nonzero(spec, inputs)
    out = fresh_outputs(spec, inputs, base, None)
    calls = {name: (lambda c=config: spec.launch(inputs, c, out)) for name, config in configs.items()}
    for call in calls.values():
        call()  # compiled before any timing
    if gpu.device().type == "cuda":
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in calls}
    gpu_times: dict[str, list[float | None]] = {name: [] for name in calls}
    for _ in range(ROUNDS):
        for name, call in calls.items():
            times[name].append(bench.time_ms(call, **TIMING))
            if gpu.device().type == "cuda":
                gpu_times[name].append(bench.graph_ms(call, rep_ms=TIMING["rep_ms"]))
    record.update({f"{name}_ms": statistics.median(ms) for name, ms in times.items()})
    if all(ms and None not in ms for ms in gpu_times.values()):
        record.update({f"{name}_gpu_ms": statistics.median(ms) for name, ms in gpu_times.items()})
    return None if failure is None else f"{failure.kind}: {failure.reason}"
