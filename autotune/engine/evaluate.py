"""Evaluating one config on one problem: the gate first (Hypothesis problems against float64), then the
timing; each distinct config once."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import optuna
import torch

from autotune.engine.outcome import TrialOutcome
from autotune.gate.compare import fresh_outputs
from autotune.gate.verify import (
    KnownFailure,
    ReferenceCache,
    VerifyResult,
    check_problem,
    draw_problems,
    verify,
)
from autotune.identity import Outcome, config_key
from autotune.measure import bench
from autotune.space import Config, Problem
from autotune.spec import KernelSpec

COMPILE_ERRORS = ("CompilationError", "OutOfResources", "CompileTimeAssertionFailure")


class Evaluator:
    """Runs the gate then the timing for configs on one problem, once per distinct config."""

    def __init__(
        self,
        spec: KernelSpec,
        problem: Problem,
        dtype: torch.dtype,
        *,
        examples: int,
        seed: int,
        max_numel: int,
        known_failures: Sequence[KnownFailure] = (),
    ):
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
        self._out = fresh_outputs(self.spec, self.inputs, base, None)

    def close(self) -> None:
        """Release what the evaluator holds (nothing here; an isolated one stops its worker)."""

    def evaluated(self) -> int:
        """Distinct configs compiled and checked so far."""
        return sum(o.outcome != Outcome.INVALID for o in self.cache.values())

    def baseline_ms(self) -> float | None:
        return bench.kernel_ms(lambda: self.spec.baseline(self.inputs))

    def reverify(self, config: Config, *, examples: int, seed: int) -> VerifyResult:
        """The winner's final gate: a fresh check with more examples and another seed."""
        return verify(
            self.spec,
            config,
            self.dtype,
            examples=examples,
            seed=seed,
            max_numel=self.max_numel,
            extra_problems=self.edges,
            known_failures=self.known_failures,
        )

    def problem_config(self, trial: optuna.Trial) -> Config:
        """The config a trial proposes for this problem (asking again later returns the same)."""
        return self.spec.space.suggest(trial, self.problem)

    @property
    def problems_run(self) -> list[Problem]:
        """Problems a config is launched on: the timed one, its bucket's edges, and the Hypothesis draws
        seen so far (the same seed draws the same problems for every config that passes): before the first
        config is checked, those drawn for the default config."""
        if self._drawn is None:
            self._drawn = [
                p
                for p in draw_problems(
                    self.spec,
                    self.spec.space.default,
                    self.dtype,
                    examples=self.examples,
                    seed=self.seed,
                    max_numel=self.max_numel,
                )
                if p not in self.edges
            ]
        return [self.problem, *self.edges, *self._drawn]

    def problems_for(self, config: Config) -> list[Problem]:
        """Problems checking `config` launches it on: the timed one, its bucket's edges, and the Hypothesis
        draws `verify` makes for it. A config whose constraints reject some draws gets others than the
        default's (matmul steers the draws of large tiles to the sizes they run on), each a Triton
        specialization to compile."""
        drawn = draw_problems(
            self.spec, config, self.dtype, examples=self.examples, seed=self.seed, max_numel=self.max_numel
        )
        return [self.problem, *self.edges, *(p for p in drawn if p not in self.edges)]

    def is_new(self, config: Config) -> bool:
        """Not evaluated yet, and allowed by the constraints: a config worth compiling."""
        return config_key(config) not in self.cache and not self.spec.space.rejects(config, self.problem)

    def __call__(self, config: Config, number: int = -1) -> TrialOutcome:
        key = config_key(config)
        if key not in self.cache:
            self.cache[key] = self._evaluate(config, number)
        cached = self.cache[key]
        return dataclasses.replace(cached, number=number, config=config)

    def _phase(self, name: str, started: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def _evaluate(self, config: Config, number: int) -> TrialOutcome:
        reason = self.spec.space.rejects(config, self.problem)
        if reason:
            return TrialOutcome(number, config, Outcome.INVALID, reason)
        started = time.perf_counter()
        try:
            return self._verify_and_time(config, number, started)
        finally:
            self._phase("evaluate", started)

    def _verify_and_time(self, config: Config, number: int, started: float) -> TrialOutcome:
        failure = check_problem(self.spec, config, self.problem, self.dtype, seed=self.seed, cache=self.references)
        if failure is not None:
            kind = Outcome.COMPILE_ERROR if failure.reason.startswith(COMPILE_ERRORS) else Outcome(failure.kind)
            return TrialOutcome(number, config, kind, failure.reason, example=failure.problem)
        result = verify(
            self.spec,
            config,
            self.dtype,
            examples=self.examples,
            seed=self.seed,
            max_numel=self.max_numel,
            extra_problems=self.edges,
            cache=self.references,
            known_failures=self.known_failures,
        )
        if result.failure is not None:
            f = result.failure
            kind = Outcome.COMPILE_ERROR if f.reason.startswith(COMPILE_ERRORS) else Outcome(f.kind)
            return TrialOutcome(number, config, kind, f.reason, example=f.problem)
        self.examples_passed[config_key(config)] = result.examples + 1
        if not self._drawn:  # not drawn yet, or the default's draws were none of them: those of the first pass
            self._drawn = [p for p in result.problems if p not in self.edges]
        timed = time.perf_counter()
        ms, timing = bench.kernel_time(lambda: self.spec.launch(self.inputs, config, self._out), **self.timing)
        self._phase("time", timed)
        return TrialOutcome(number, config, Outcome.OK, None, ms, timing=timing)
