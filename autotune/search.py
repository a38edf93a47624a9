"""The search: one Optuna study per (kernel, GPU, dtype, shape bucket); every trial verified before timed."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import optuna
import torch
import triton

from autotune import bench, gpu
from autotune.db import BestRow, ConfigStore, TrialRow
from autotune.precompile import CompilePool
from autotune.space import Config, Problem
from autotune.spec import DTYPE_NAMES, KernelSpec, shape_label
from autotune.verify import (KnownFailure, ReferenceCache, VerifyResult, check_problem, draw_problems, outputs_like,
                             verify)

SAMPLERS = ("tpe", "gp", "random", "grid")
MAX_TRIALS_PER_EVALUATION = 4
"""Bound on trials per distinct evaluation. Rejected configs and repeats cost no GPU time but do cost
sampler time: on the H100, TPE on softmax's conditional space asked for repeats so often that a
30-evaluation budget ran to ~500 trials in 3 minutes; a converged sampler repeats itself, so stop."""
COMPILE_ERRORS = ("CompilationError", "OutOfResources", "CompileTimeAssertionFailure")


@dataclass(frozen=True)
class TrialOutcome:
    """What one trial's config did: ok with a time, or why not."""

    number: int
    config: Config
    outcome: str  # ok | invalid | compile_error | incorrect | error | crashed | timeout (the last two: isolated only)
    reason: str | None = None
    time_ms: float | None = None
    example: Problem | None = None
    timing: str | None = None  # how time_ms was taken: one of autotune.db.store.TIMINGS


@dataclass
class SearchResult:
    """The best verified config of one study, with its evidence."""

    kernel: str
    gpu: str
    dtype: str
    bucket: str
    problem: Problem
    best_config: Config | None
    best_ms: float | None
    default_ms: float | None
    baseline_ms: float | None
    examples_verified: int
    rate: bench.Rate | None
    trials: list[TrialOutcome] = field(default_factory=list)
    evaluations: int = 0  # distinct configs compiled and checked (rejected ones and repeats cost nothing)
    stored: bool = False
    study_name: str = ""
    compiled_ahead: int = 0  # configs built by compile-ahead workers before their turn
    seconds: dict[str, float] = field(default_factory=dict)  # wall time by phase: where a search's time went
    best_timing: str | None = None  # how best_ms was taken: one of autotune.db.store.TIMINGS
    budget: int | None = None  # distinct configs the study was to evaluate (`study_budget`); None where not known

    @property
    def speedup_vs_default(self) -> float | None:
        return self.default_ms / self.best_ms if self.best_ms and self.default_ms else None

    @property
    def speedup_vs_baseline(self) -> float | None:
        return self.baseline_ms / self.best_ms if self.best_ms and self.baseline_ms else None

    def tally(self) -> TrialTally:
        """The trials counted as the budget counts them (see TrialTally)."""
        tally = TrialTally()
        for t in self.trials:
            tally.add(t)
        return tally

    def counts(self) -> dict[str, int]:
        """Distinct configs tried, by outcome (a config proposed again counts once)."""
        return self.tally().counts()

    def evaluated_summary(self) -> str:
        """'20 of 20 asked evaluated, in 25 trials (...)': how the trials came to the budget, and why they fell
        short of it where they did."""
        tally = self.tally()
        asked = f" of {self.budget} asked" if self.budget is not None else ""
        text = f"{self.evaluations}{asked} evaluated"
        if len(self.trials) != self.evaluations:
            text += f", in {len(self.trials)} trials ({tally.uncounted()})"
        if self.budget is not None and self.evaluations < self.budget:
            capped = len(self.trials) >= self.budget * MAX_TRIALS_PER_EVALUATION
            text += ("; stopped at the cap of trials: the sampler kept proposing configs already tried or rejected"
                     if capped else "; stopped early: the timeout ran out")
        return text


class TrialTally:
    """A study's trials counted as its budget counts them: distinct configs, each by the outcome it had. A
    config proposed again (a repeat: its first outcome reused, nothing run) and a config the space's
    constraints reject (never compiled) take no step of the budget."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}  # config key -> outcome of its first trial
        self.repeats = 0

    def add(self, outcome: TrialOutcome) -> bool:
        """Count one trial; True where it evaluated a config not tried before: one step of the budget."""
        key = json.dumps(outcome.config, sort_keys=True)
        if key in self.outcomes:
            self.repeats += 1
            return False
        self.outcomes[key] = outcome.outcome
        return outcome.outcome != "invalid"

    @property
    def evaluated(self) -> int:
        return sum(o != "invalid" for o in self.outcomes.values())

    @property
    def rejected(self) -> int:
        return sum(o == "invalid" for o in self.outcomes.values())

    def counts(self) -> dict[str, int]:
        """Distinct configs by outcome."""
        out: dict[str, int] = {}
        for o in self.outcomes.values():
            out[o] = out.get(o, 0) + 1
        return out

    def uncounted(self) -> str:
        """The trials that took no step of the budget: 'not counted: 4 repeats, 1 rejected by the constraints'."""
        parts = [f"{self.repeats} repeat{'s' * (self.repeats != 1)}"] if self.repeats else []
        if self.rejected:
            parts.append(f"{self.rejected} rejected by the constraints")
        return "not counted: " + ", ".join(parts) if parts else ""

    def describe(self) -> str:
        """'invalid:1 ok:20 (+4 repeats)': distinct configs by outcome, and the repeats."""
        text = " ".join(f"{k}:{v}" for k, v in sorted(self.counts().items()))
        return text + (f" (+{self.repeats} repeat{'s' * (self.repeats != 1)})" if self.repeats else "")


def check_gpu(requested: str, *, isolated: bool = False) -> gpu.GPUInfo:
    """The GPU a search measures; it must be the one asked for ('auto' takes whatever is here).
    `isolated`: ask a worker process, so that this one never creates a CUDA context."""
    from autotune import isolation

    return gpu.require_gpu(
        requested, "a search measures the GPU it runs on: run it there, or pass --gpu auto",
        isolation.worker_gpu() if isolated else None,
    )


def check_request(
    spec: KernelSpec, problem: Problem, dtype: torch.dtype, gpu_name: str, *, isolated: bool = False
) -> gpu.GPUInfo:
    """The GPU a search of problem in dtype measures, once the kernel can run it; ValueError if not.
    `isolated`: asked of a worker process (see check_gpu)."""
    info = check_gpu(gpu_name, isolated=isolated)
    check_job(spec, problem, dtype, info)
    return info


def check_job(spec: KernelSpec, problem: Problem, dtype: torch.dtype, info: gpu.GPUInfo) -> None:
    """ValueError unless the kernel can search problem in dtype on the device `info` describes: the dtype
    supported, the default config runs on it (the runtime's fallback), and it fits the device's memory
    (`check_fits`)."""
    if dtype not in spec.dtypes:
        raise ValueError(f"dtype {dtype} is not supported by {spec.name}; expected one of {spec.dtypes}")
    reason = spec.space.rejects(spec.space.default, problem)
    if reason:
        raise ValueError(f"{spec.name}: the default config cannot run on {problem}: {reason}")
    check_fits(spec, problem, dtype, info)


def memory_needed(spec: KernelSpec, problem: Problem, dtype: torch.dtype) -> int:
    """Bytes a search of problem in dtype holds at once at least: its inputs and outputs (the kernel's
    minimum bytes moved), and those again in float64 while the reference computes."""
    moved = spec.cost(problem, dtype).bytes
    return int(moved + moved * torch.finfo(torch.float64).bits / torch.finfo(dtype).bits)


def check_fits(spec: KernelSpec, problem: Problem, dtype: torch.dtype, info: gpu.GPUInfo) -> None:
    """ValueError where problem cannot fit the device's memory (the host's under the interpreter): said before
    anything is allocated, not as an out-of-memory error minutes in. Unknown memory is not checked."""
    if not info.memory_bytes:
        return
    needed = memory_needed(spec, problem, dtype)
    if needed > info.memory_bytes:
        where = "this machine's memory (the interpreter's device)" if info.is_interpreter else f"the {info.name}'s memory"
        raise ValueError(
            f"{spec.name} {shape_label(problem)} in {DTYPE_NAMES[dtype]} needs at least {needed / 2**30:.1f} GiB (its "
            f"inputs and outputs, and their float64 copies for the reference), more than {where}: "
            f"{info.memory_bytes / 2**30:.1f} GiB")


def study_budget(spec: KernelSpec, problem: Problem, sampler: str, trials: int) -> int:
    """Distinct configs a study of problem evaluates at most: `trials`, or with the grid sampler every config
    the constraints allow on it (problem as `spec.problem_for` gives it)."""
    return len(spec.space.grid_for(problem)) if sampler == "grid" else trials


def default_max_numel(info: gpu.GPUInfo) -> int:
    """Largest Hypothesis-drawn problem a trial verifies on: small under the interpreter."""
    return (1 << 14) if info.is_interpreter else (1 << 20)


def make_sampler(name: str, spec: KernelSpec, seed: int | None) -> optuna.samplers.BaseSampler:
    """An Optuna sampler by name: tpe, gp, random or grid (the whole space, constraints applied per trial)."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True, constant_liar=True)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":  # the search enqueues every valid config; the sampler only fills gaps
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"sampler {name!r} is not one of {list(SAMPLERS)}")


def study_name(spec: KernelSpec, gpu_name: str, dtype: torch.dtype, bucket: str) -> str:
    return f"{spec.name}:{spec.source_hash[:8]}:{gpu_name}:{DTYPE_NAMES[dtype]}:{bucket}"


class Evaluator:
    """Runs the gate then the timing for configs on one problem, once per distinct config."""

    def __init__(self, spec: KernelSpec, problem: Problem, dtype: torch.dtype, *, examples: int, seed: int, max_numel: int,
                 known_failures: Sequence[KnownFailure] = ()):
        self.spec, self.problem, self.dtype = spec, spec.problem_for(problem, dtype), dtype
        self.examples, self.seed, self.max_numel = examples, seed, max_numel
        self.known_failures = list(known_failures)  # checked on every config first (the bucket's flagged rows')
        self.edges = [spec.problem_for(p, dtype) for p in spec.edges_for(self.problem)[1:]]
        self.cache: dict[str, TrialOutcome] = {}
        # Capped repetitions (see bench.time_ms): plenty for a ranking, and small kernels stay cheap to time.
        self.timing = {"warmup_ms": 25.0, "rep_ms": 100.0, "max_reps": 300}
        self.examples_passed: dict[str, int] = {}
        self.compiled_ahead = 0
        self._drawn: list[Problem] | None = None  # the gate's draws, once a compile pool first asks for them
        self.seconds: dict[str, float] = {}
        self._prepare()

    def _prepare(self) -> None:
        """Build the timed inputs and the reference cache (an isolated evaluator starts its worker instead)."""
        self.references = ReferenceCache()
        self.inputs, base, _ = self.references.get(self.spec, self.problem, self.dtype, self.seed)  # timed, and checked
        self._out = outputs_like(base, None)

    def close(self) -> None:
        """Release what the evaluator holds (nothing here; an isolated one stops its worker)."""

    def evaluated(self) -> int:
        """Distinct configs compiled and checked so far."""
        return sum(o.outcome != "invalid" for o in self.cache.values())

    def baseline_ms(self) -> float | None:
        return bench.kernel_ms(lambda: self.spec.baseline(self.inputs))

    def reverify(self, config: Config, *, examples: int, seed: int) -> VerifyResult:
        """The winner's final gate: a fresh check with more examples and another seed."""
        return verify(self.spec, config, self.dtype, examples=examples, seed=seed, max_numel=self.max_numel,
                      extra_problems=self.edges, known_failures=self.known_failures)

    def problem_config(self, trial: optuna.Trial) -> Config:
        """The config a trial proposes for this problem (asking again later returns the same)."""
        return self.spec.space.suggest(trial, self.problem)

    @property
    def problems_run(self) -> list[Problem]:
        """Problems a config is launched on: the timed one, its bucket's edges, and the Hypothesis draws
        seen so far (the same seed draws the same problems for every config that passes): before the first
        config is checked, those drawn for the default config."""
        if self._drawn is None:
            self._drawn = [p for p in draw_problems(self.spec, self.spec.space.default, self.dtype, examples=self.examples,
                                                    seed=self.seed, max_numel=self.max_numel) if p not in self.edges]
        return [self.problem, *self.edges, *self._drawn]

    def problems_for(self, config: Config) -> list[Problem]:
        """Problems checking `config` launches it on: the timed one, its bucket's edges, and the Hypothesis
        draws `verify` makes for it. A config whose constraints reject some draws gets others than the
        default's (matmul steers the draws of large tiles to the sizes they run on), each a Triton
        specialization to compile."""
        drawn = draw_problems(self.spec, config, self.dtype, examples=self.examples, seed=self.seed,
                              max_numel=self.max_numel)
        return [self.problem, *self.edges, *(p for p in drawn if p not in self.edges)]

    def is_new(self, config: Config) -> bool:
        """Not evaluated yet, and allowed by the constraints: a config worth compiling."""
        return json.dumps(config, sort_keys=True) not in self.cache and not self.spec.space.rejects(config, self.problem)

    def __call__(self, config: Config, number: int = -1) -> TrialOutcome:
        key = json.dumps(config, sort_keys=True)
        if key not in self.cache:
            self.cache[key] = self._evaluate(config, number)
        cached = self.cache[key]
        return dataclasses.replace(cached, number=number, config=config)

    def _phase(self, name: str, started: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def _evaluate(self, config: Config, number: int) -> TrialOutcome:
        reason = self.spec.space.rejects(config, self.problem)
        if reason:
            return TrialOutcome(number, config, "invalid", reason)
        started = time.perf_counter()
        try:
            return self._verify_and_time(config, number, started)
        finally:
            self._phase("evaluate", started)

    def _verify_and_time(self, config: Config, number: int, started: float) -> TrialOutcome:
        failure = check_problem(self.spec, config, self.problem, self.dtype, seed=self.seed, cache=self.references)
        if failure is not None:
            kind = "compile_error" if failure.reason.startswith(COMPILE_ERRORS) else failure.kind
            return TrialOutcome(number, config, kind, failure.reason, example=failure.problem)
        result = verify(
            self.spec, config, self.dtype, examples=self.examples, seed=self.seed, max_numel=self.max_numel,
            extra_problems=self.edges, cache=self.references, known_failures=self.known_failures,
        )
        if result.failure is not None:
            f = result.failure
            kind = "compile_error" if f.reason.startswith(COMPILE_ERRORS) else f.kind
            return TrialOutcome(number, config, kind, f.reason, example=f.problem)
        self.examples_passed[json.dumps(config, sort_keys=True)] = result.examples + 1
        if not self._drawn:  # not drawn yet, or the default's draws were none of them: those of the first pass
            self._drawn = [p for p in result.problems if p not in self.edges]
        timed = time.perf_counter()
        ms, timing = bench.kernel_time(lambda: self.spec.launch(self.inputs, config, self._out), **self.timing)
        self._phase("time", timed)
        return TrialOutcome(number, config, "ok", None, ms, timing=timing)


def search(
    spec: KernelSpec,
    problem: Problem,
    dtype: torch.dtype,
    *,
    gpu_name: str = "auto",
    trials: int = 50,
    timeout: float | None = None,
    sampler: str = "tpe",
    store: ConfigStore | None = None,
    storage: str | None = None,
    seed: int = 0,
    examples: int = 20,
    final_examples: int = 100,
    max_numel: int | None = None,
    on_trial: Callable[[TrialOutcome, float | None], None] | None = None,
    compile_workers: int | CompilePool = 0,
    isolate: bool | None = None,
    trial_timeout: float | None = None,
    warm_start: Sequence[Config] = (),
    on_final_check: Callable[[Config, VerifyResult, float], None] | None = None,
) -> SearchResult:
    """Search one problem's bucket: warm start from the default and any stored best, verify every
    trial before timing it, re-verify the winner with more examples, and store it with its evidence.

    With `compile_workers` > 1 (or a CompilePool, shared by several searches) the sampler proposes that
    many configs at a time, and worker processes compile them in parallel before they are verified and
    timed one by one.

    With `isolate` (the default on a GPU, or whenever `trial_timeout` is given) every config compiles, runs
    and is timed in a worker process: one that crashes it or runs past `trial_timeout` seconds is recorded
    as crashed or timeout and the worker restarted; this process never creates a CUDA context.

    `warm_start` configs are tried first too, after the default and the stored best (e.g. the config the
    runtime picks for this problem from a nearby bucket). `on_final_check` hears each final re-verification
    (the config, its result, seconds taken) as it ends."""
    from autotune import isolation

    isolate = isolation.use_isolation(isolate, trial_timeout, spec)
    problem = spec.problem_for(problem, dtype)
    info = check_request(spec, problem, dtype, gpu_name, isolated=isolate)
    if max_numel is None:
        max_numel = default_max_numel(info)
    bucket = spec.bucket(problem)
    name = study_name(spec, info.name, dtype, bucket)
    known = bucket_failures(store, spec, info.name, dtype, bucket)
    if isolate:
        evaluator = isolation.IsolatedEvaluator(
            spec, problem, dtype, examples=examples, seed=seed, max_numel=max_numel, trial_timeout=trial_timeout,
            known_failures=known,
        )
    else:
        evaluator = Evaluator(spec, problem, dtype, examples=examples, seed=seed, max_numel=max_numel, known_failures=known)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=name, storage=storage, sampler=make_sampler(sampler, spec, seed), direction="minimize", load_if_exists=True
    )
    for warm in [*warm_starts(spec, store, info.name, dtype, bucket, problem), *(spec.space.validate(c) for c in warm_start)]:
        study.enqueue_trial(warm, skip_if_exists=True)

    outcomes: list[TrialOutcome] = []
    best: list[float] = []

    def objective(trial: optuna.Trial) -> float:
        outcome = evaluator(spec.space.suggest(trial, problem), trial.number)
        outcomes.append(outcome)
        record_outcome(trial, outcome)
        if outcome.time_ms is not None:
            best.append(min(best[-1], outcome.time_ms) if best else outcome.time_ms)
        if on_trial:
            on_trial(outcome, best[-1] if best else None)
        if outcome.outcome != "ok":
            raise optuna.TrialPruned(outcome.reason)  # TPE ranks pruned trials below every measured one
        return outcome.time_ms

    if sampler == "grid":  # every config the constraints allow, each once
        grid = spec.space.grid_for(problem)
        for config in grid:
            study.enqueue_trial(config, skip_if_exists=True)
        budget = len(grid)  # as study_budget counts it
    else:
        budget = trials

    def enough(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        # Configs the constraints reject cost nothing (never compiled), nor do repeats (cached):
        # the budget counts distinct configs evaluated.
        if evaluator.evaluated() >= budget:
            study.stop()

    with contextlib.ExitStack() as stack:
        pool = compile_workers if isinstance(compile_workers, CompilePool) else (
            stack.enter_context(CompilePool(compile_workers, timeout=trial_timeout)) if compile_workers > 1 else None)
        started = time.perf_counter()
        if pool is not None:
            _optimize_in_batches(study, objective, evaluator, pool, budget, timeout)
        else:
            study.optimize(objective, n_trials=budget * MAX_TRIALS_PER_EVALUATION, timeout=timeout, callbacks=[enough],
                           catch=())
        evaluator.seconds["search"] = time.perf_counter() - started

        result = SearchResult(
            kernel=spec.name, gpu=info.name, dtype=DTYPE_NAMES[dtype], bucket=bucket, problem=problem,
            best_config=None, best_ms=None, default_ms=None, baseline_ms=evaluator.baseline_ms(),
            examples_verified=0, rate=None, trials=outcomes, evaluations=evaluator.evaluated(), study_name=name,
            compiled_ahead=evaluator.compiled_ahead, seconds=evaluator.seconds, budget=budget,
        )
        result.default_ms = evaluator(dict(spec.space.default)).time_ms

        def final_check(config: Config) -> VerifyResult:
            if pool is not None:  # its final problems compiled ahead, across the pool
                pool.compile_for_verify(spec, config, dtype, examples=final_examples, seed=seed + 1, max_numel=max_numel,
                                        extra_problems=evaluator.edges)
            return evaluator.reverify(config, examples=final_examples, seed=seed + 1)

        try:
            return conclude(
                result, spec, dtype, info, examples_passed=evaluator.examples_passed, seed=seed,
                final_examples=final_examples, max_numel=max_numel, store=store, reverify=final_check,
                on_final_check=on_final_check,
            )
        finally:
            evaluator.close()


def bucket_failures(store: ConfigStore | None, spec: KernelSpec, gpu_name: str, dtype: torch.dtype,
                    bucket: str) -> list[KnownFailure]:
    """The failing problems (and seeds) that re-verification recorded on this bucket's flagged rows, of any
    source of the kernel: a search checks every config on them first, so a config that was fast but
    wrong there cannot win again on inputs that happen to pass."""
    if store is None:
        return []
    rows = store.best_rows(kernel=spec.name, gpu=gpu_name, dtype=DTYPE_NAMES[dtype])
    return [failure for row in rows if row.bucket == bucket and (failure := row.recorded_failure) is not None]


def conclude(
    result: SearchResult,
    spec: KernelSpec,
    dtype: torch.dtype,
    info: gpu.GPUInfo,
    *,
    examples_passed: dict[str, int],
    seed: int,
    final_examples: int,
    max_numel: int,
    store: ConfigStore | None,
    reverify: Callable[[Config], VerifyResult] | None = None,
    on_final_check: Callable[[Config, VerifyResult, float], None] | None = None,
) -> SearchResult:
    """Re-verify the fastest configs of a finished study with more examples (and another seed), take the
    first that passes as the best, and store it with every trial; `examples_passed` per config key. A
    config that failed re-verification for this bucket (its row flagged in `store`) is not taken again.
    `reverify` runs that check elsewhere (an isolated evaluator's worker); by default it runs here.
    `on_final_check` hears each check (config, result, seconds) as it ends."""
    started = time.perf_counter()
    flagged = set() if store is None else {
        json.dumps(row.config, sort_keys=True)
        for row in store.best_rows(kernel=spec.name, source_hash=spec.source_hash, gpu=info.name, dtype=result.dtype)
        if row.bucket == result.bucket and row.flagged}
    for outcome in sorted((o for o in result.trials if o.outcome == "ok"), key=lambda o: o.time_ms):
        if json.dumps(outcome.config, sort_keys=True) in flagged:
            continue  # the store would keep the flagged row rather than take its config back
        checked = time.perf_counter()
        if reverify is not None:
            final = reverify(outcome.config)
        else:
            final = verify(
                spec, outcome.config, dtype, examples=final_examples, seed=seed + 1, max_numel=max_numel,
                extra_problems=spec.edges_for(result.problem)[1:],
            )
        if on_final_check is not None:
            on_final_check(outcome.config, final, time.perf_counter() - checked)
        if final.passed:
            result.best_config, result.best_ms, result.best_timing = outcome.config, outcome.time_ms, outcome.timing
            key = json.dumps(outcome.config, sort_keys=True)
            result.examples_verified = examples_passed.get(key, 0) + final.examples
            break
    result.seconds["final_verify"] = time.perf_counter() - started
    if result.best_ms is not None:
        result.rate = bench.rate(spec.cost(result.problem, dtype), result.best_ms, bound=spec.bound, dtype_name=result.dtype, info=info)
    if store is not None:
        _record(store, spec, result, info)
    return result


def record_outcome(trial: optuna.Trial, outcome: TrialOutcome) -> None:
    """Keep what a trial's config did in the study, where `outcome_of` reads it back in any process."""
    trial.set_user_attr("config", outcome.config)
    trial.set_user_attr("outcome", outcome.outcome)
    if outcome.timing:
        trial.set_user_attr("timing", outcome.timing)
    if outcome.reason:
        trial.set_user_attr("reason", outcome.reason)
    if outcome.example is not None:
        trial.set_user_attr("example", outcome.example)


def outcome_of(trial: optuna.trial.FrozenTrial) -> TrialOutcome | None:
    """The outcome `record_outcome` kept for a finished trial; None for a trial that never finished."""
    attrs = trial.user_attrs
    if trial.state not in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) or "outcome" not in attrs:
        return None
    return TrialOutcome(trial.number, attrs["config"], attrs["outcome"], attrs.get("reason"), trial.value, attrs.get("example"),
                        attrs.get("timing"))


def _optimize_in_batches(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], float],
    evaluator: Evaluator,
    pool: CompilePool,
    budget: int,
    timeout: float | None,
) -> None:
    """study.optimize's loop, a batch of trials at a time: ask, compile the new configs in parallel, then
    verify and time each in order. The sampler's constant liar keeps a batch's proposals apart."""
    deadline = None if timeout is None else time.monotonic() + timeout
    asked = 0
    while evaluator.evaluated() < budget and asked < budget * MAX_TRIALS_PER_EVALUATION:
        if deadline is not None and time.monotonic() > deadline:
            break
        trials = [study.ask() for _ in range(max(1, min(pool.workers, budget - evaluator.evaluated())))]
        asked += len(trials)
        configs = {json.dumps(c, sort_keys=True): c for c in (evaluator.problem_config(t) for t in trials)}
        started = time.perf_counter()
        fresh = [c for c in configs.values() if evaluator.is_new(c)]
        if fresh:
            work = [(config, evaluator.problems_for(config)) for config in fresh]
            evaluator.compiled_ahead += pool.compile_each(evaluator.spec, evaluator.dtype, work)
        evaluator.seconds["compile_ahead"] = evaluator.seconds.get("compile_ahead", 0.0) + time.perf_counter() - started
        for trial in trials:
            try:
                study.tell(trial, objective(trial))
            except optuna.TrialPruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)


NEIGHBOUR_WARM_STARTS = 3
"""How many winners of neighbouring searches a study also tries first (see `warm_starts`)."""
EARLIER_SOURCE_WARM_STARTS = 2
"""How many winners of this bucket under earlier sources of the kernel a study also tries first."""


def warm_starts(spec: KernelSpec, store: ConfigStore | None, gpu_name: str, dtype: torch.dtype, bucket: str,
                problem: Problem | None = None) -> list[Config]:
    """The configs a study tries first: the space's default, then the best stored for its bucket, if any,
    then (up to EARLIER_SOURCE_WARM_STARTS) this bucket's winners under earlier sources of the kernel in
    `store`, newest first, where their configs are still in the space: a changed kernel is re-tuned from
    where its last search ended.

    Given the problem, then the space's own starts for it (`SearchSpace.starts`: configs known to do well on
    such problems), and up to NEIGHBOUR_WARM_STARTS winners of neighbouring searches that run on it,
    nearest first: this bucket in another dtype or on another GPU, then the nearest buckets (from `store`
    and the shipped database). Each is only a first guess, measured here like any trial; nothing is copied."""
    configs = [dict(spec.space.default)]
    if store is not None:
        rows = [row for row in store.best_rows(kernel=spec.name, gpu=gpu_name, dtype=DTYPE_NAMES[dtype])
                if row.bucket == bucket and not row.flagged]
        configs += [config for row in rows if row.source_hash == spec.source_hash
                    if (config := _stored_config(spec, row)) is not None]
        earlier: list[Config] = []
        older_rows = [row for row in rows if row.source_hash != spec.source_hash]
        for row in sorted(older_rows, key=lambda row: row.created_at, reverse=True):
            if len(earlier) == EARLIER_SOURCE_WARM_STARTS:
                break
            config = _stored_config(spec, row)
            if config is not None and config not in configs and config not in earlier and (
                    problem is None or spec.space.rejects(config, problem) is None):
                earlier.append(config)
        configs += earlier
    if problem is not None:
        configs += [config for config in spec.space.starts(problem) if config not in configs]
        neighbours: list[Config] = []
        for config in _neighbour_winners(spec, store, gpu_name, DTYPE_NAMES[dtype], bucket, problem):
            if len(neighbours) == NEIGHBOUR_WARM_STARTS:
                break
            if config not in configs and config not in neighbours:
                neighbours.append(config)
        configs += neighbours
    return configs


def _stored_config(spec: KernelSpec, row) -> Config | None:
    """row's config if it belongs to spec's space; None for a corrupt row or one from a space without it."""
    try:
        return spec.space.validate(row.config)
    except ValueError:
        return None


def _neighbour_winners(spec: KernelSpec, store: ConfigStore | None, gpu_name: str, dtype: str, bucket: str,
                       problem: Problem) -> list[Config]:
    """Stored bests of this kernel's source other than this search's own row that run on `problem`, nearest
    bucket first, then the same dtype, then the same GPU (other GPUs' only on a GPU)."""
    from autotune import db

    rows = []
    if store is not None:
        rows += store.best_rows(kernel=spec.name, source_hash=spec.source_hash)
    shipped = db.shipped_path()
    if shipped.exists() and (store is None or store.url != db.as_url(str(shipped))):
        with ConfigStore(db.as_url(str(shipped)), readonly=True) as shipped_store:
            rows += shipped_store.best_rows(kernel=spec.name, source_hash=spec.source_hash)
    # Under the interpreter a GPU's winner is no better a guess than any other config.
    other_gpus = not gpu.current_gpu().is_interpreter
    ranked = []
    for row in rows:
        if row.flagged or (row.gpu, row.dtype, row.bucket) == (gpu_name, dtype, bucket):
            continue
        if row.gpu != gpu_name and not other_gpus:
            continue
        distance = spec.bucket_distance(row.bucket, bucket)
        config = _stored_config(spec, row)
        if config is not None and distance < float("inf") and spec.space.rejects(config, problem) is None:
            ranked.append(((distance, row.dtype != dtype, row.gpu != gpu_name), config))
    ranked.sort(key=lambda r: r[0])
    return [config for _, config in ranked]


def _record(store: ConfigStore, spec: KernelSpec, result: SearchResult, info: gpu.GPUInfo) -> None:
    store.record_trials(
        [
            TrialRow(
                study=result.study_name, kernel=spec.name, source_hash=spec.source_hash, gpu=info.name,
                dtype=result.dtype, bucket=result.bucket, number=t.number, config_json=json.dumps(t.config, sort_keys=True),
                outcome=t.outcome, reason=t.reason, time_ms=t.time_ms,
                failing_example_json=json.dumps(t.example, sort_keys=True) if t.example is not None else None,
            )
            for t in result.trials
        ]
    )
    if result.best_config is None or result.best_ms is None or not math.isfinite(result.best_ms):
        return
    result.stored = store.record_best(
        BestRow(
            kernel=spec.name, source_hash=spec.source_hash, gpu=info.name, device_name=info.device_name,
            dtype=result.dtype, bucket=result.bucket, config_json=json.dumps(result.best_config, sort_keys=True),
            problem_json=json.dumps(result.problem, sort_keys=True), time_ms=result.best_ms, timing=result.best_timing,
            default_time_ms=result.default_ms, baseline_time_ms=result.baseline_ms,
            examples_verified=result.examples_verified, triton_version=triton.__version__,
            torch_version=torch.__version__,
        )
    )
