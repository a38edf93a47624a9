"""A study's result: its trials read back from the study, the fastest configs re-verified with more problems
(another seed), and the first that passes stored with its evidence and every trial."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna
import torch
import triton

from autotune import gpu
from autotune.db import BestRow, ConfigStore, TrialRow
from autotune.engine.evaluate import Evaluator
from autotune.engine.outcome import FINISHED, TrialOutcome, TrialTally, evaluated, finished_outcomes, outcome_of
from autotune.engine.plan import MAX_TRIALS_PER_EVALUATION, StudyPlan
from autotune.gate.verify import VerifyResult, verify
from autotune.identity import Outcome, config_key, problem_key
from autotune.measure import bench
from autotune.space import Config, Problem
from autotune.spec import KernelSpec


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
    best_timing: str | None = None  # how best_ms was taken: one of autotune.db.rows.TIMINGS
    budget: int | None = None  # distinct configs the study was to evaluate; None where not known

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
            text += (
                "; stopped at the cap of trials: the sampler kept proposing configs already tried or rejected"
                if capped
                else "; stopped early: the timeout ran out"
            )
        return text


def conclude_study(
    study: optuna.Study,
    plan: StudyPlan,
    evaluator: Evaluator,
    info: gpu.GPUInfo,
    *,
    store: ConfigStore | None,
    final_examples: int,
    reverify: Callable[[Config], VerifyResult] | None = None,
    on_final_check: Callable[[Config, VerifyResult, float], None] | None = None,
) -> SearchResult:
    """A finished study's result, whichever processes ran its trials: the trials as the study kept them, the
    default config and PyTorch timed by `evaluator` here, the best re-verified (by `reverify`, default the
    evaluator's own) with final_examples problems on another seed and stored with every finished trial."""
    spec = evaluator.spec
    known = finished_outcomes(study)
    trials = [outcome_of(t) for t in study.get_trials(deepcopy=False, states=FINISHED)]
    result = SearchResult(
        kernel=spec.name,
        gpu=info.name,
        dtype=plan.dtype,
        bucket=spec.bucket(evaluator.problem),
        problem=evaluator.problem,
        best_config=None,
        best_ms=None,
        default_ms=None,
        baseline_ms=evaluator.baseline_ms(),
        examples_verified=0,
        rate=None,
        trials=[t for t in trials if t is not None],
        evaluations=evaluated(study),
        study_name=study.study_name,
        compiled_ahead=evaluator.compiled_ahead,
        seconds=evaluator.seconds,
        budget=plan.budget,
    )
    default = known.get(config_key(spec.space.default))
    result.default_ms = (default[0] if default else evaluator(dict(spec.space.default))).time_ms
    if reverify is None:
        reverify = lambda config: evaluator.reverify(config, examples=final_examples, seed=plan.seed + 1)  # noqa: E731
    return conclude(
        result,
        spec,
        evaluator.dtype,
        info,
        examples_passed={k: n for k, (_, n) in known.items()},
        seed=plan.seed,
        final_examples=final_examples,
        max_numel=plan.max_numel,
        store=store,
        reverify=reverify,
        on_final_check=on_final_check,
    )


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
    flagged = (
        set()
        if store is None
        else {
            config_key(spec.current_config(row))
            for row in store.best_rows(
                kernel=spec.name,
                source_hash=spec.current_hashes,
                gpu=info.name,
                dtype=result.dtype,
                bucket=result.bucket,
            )
            if row.flagged and spec.row_is_current(row)
        }
    )
    for outcome in sorted((o for o in result.trials if o.outcome == Outcome.OK), key=lambda o: o.time_ms):
        if config_key(outcome.config) in flagged:
            continue  # the store would keep the flagged row rather than take its config back
        checked = time.perf_counter()
        if reverify is not None:
            final = reverify(outcome.config)
        else:
            final = verify(
                spec,
                outcome.config,
                dtype,
                examples=final_examples,
                seed=seed + 1,
                max_numel=max_numel,
                extra_problems=spec.edges_for(result.problem)[1:],
            )
        if on_final_check is not None:
            on_final_check(outcome.config, final, time.perf_counter() - checked)
        if final.passed:
            result.best_config, result.best_ms, result.best_timing = outcome.config, outcome.time_ms, outcome.timing
            key = config_key(outcome.config)
            result.examples_verified = examples_passed.get(key, 0) + final.examples
            break
    result.seconds["final_verify"] = time.perf_counter() - started
    if result.best_ms is not None:
        result.rate = bench.rate(
            spec.cost(result.problem, dtype), result.best_ms, bound=spec.bound, dtype_name=result.dtype, info=info
        )
    if store is not None:
        _record(store, spec, result, info)
    return result


def _record(store: ConfigStore, spec: KernelSpec, result: SearchResult, info: gpu.GPUInfo) -> None:
    store.record_trials(
        [
            TrialRow(
                study=result.study_name,
                kernel=spec.name,
                source_hash=spec.source_hash,
                gpu=info.name,
                dtype=result.dtype,
                bucket=result.bucket,
                number=t.number,
                config_json=config_key(t.config),
                outcome=str(t.outcome),
                reason=t.reason,
                time_ms=t.time_ms,
                failing_example_json=problem_key(t.example) if t.example is not None else None,
            )
            for t in result.trials
        ]
    )
    if result.best_config is None or result.best_ms is None or not math.isfinite(result.best_ms):
        return
    result.stored = store.record_best(
        BestRow(
            kernel=spec.name,
            source_hash=spec.source_hash,
            gpu=info.name,
            device_name=info.device_name,
            dtype=result.dtype,
            bucket=result.bucket,
            config_json=config_key(result.best_config),
            problem_json=problem_key(result.problem),
            time_ms=result.best_ms,
            timing=result.best_timing,
            default_time_ms=result.default_ms,
            baseline_time_ms=result.baseline_ms,
            examples_verified=result.examples_verified,
            triton_version=triton.__version__,
            torch_version=torch.__version__,
        )
    )
