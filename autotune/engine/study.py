"""The study loop, the one every search runs: a process asks the study for configs, evaluates each new one (a
config some process already evaluated is taken from the study), and records the outcome in the study, until
the plan's budget is spent or its time is up. A one-process search is this loop with one in-process worker;
a shared search runs it in every worker process, on one study in an Optuna storage."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import optuna

from autotune.engine.evaluate import Evaluator
from autotune.engine.outcome import TrialOutcome, finished_outcomes, record_outcome
from autotune.engine.plan import StudyPlan, budget_spent
from autotune.engine.precompile import CompilePool
from autotune.identity import Outcome, config_key

WORKER_ATTR = "worker"
"""The trial attribute naming the process that runs it (a supervisor finds a dead worker's trial by it)."""


def run_trials(
    study: optuna.Study,
    plan: StudyPlan,
    evaluator: Evaluator,
    *,
    pool: CompilePool | None = None,
    on_trial: Callable[[TrialOutcome, float | None], None] | None = None,
    worker: str | None = None,
) -> int:
    """Run trials of study until plan's budget is spent, plan.max_trials were asked or plan.timeout passed;
    returns how many this process ran. With a compile pool the sampler proposes a batch at a time and the
    pool compiles the new configs in parallel first. `on_trial` hears each outcome with the best time so far
    (this process's); `worker` names this process on each trial it runs."""
    spec, problem = evaluator.spec, evaluator.problem
    ran: list[int] = []
    best: list[float] = []

    def objective(trial: optuna.Trial) -> float:
        if worker is not None:
            trial.set_user_attr(WORKER_ATTR, worker)  # first: a supervisor finds a dead worker's trial by it
        config = spec.space.suggest(trial, problem)
        key = config_key(config)
        known = None if key in evaluator.cache else finished_outcomes(study).get(key)
        if known is not None:  # evaluated by another process: nothing to measure
            outcome, examples = dataclasses.replace(known[0], number=trial.number), known[1]
        else:
            outcome = evaluator(config, trial.number)
            examples = evaluator.examples_passed.get(key, 0)
        record_outcome(trial, outcome, examples)
        ran.append(trial.number)
        if outcome.time_ms is not None:
            best.append(min(best[-1], outcome.time_ms) if best else outcome.time_ms)
        if on_trial is not None:
            on_trial(outcome, best[-1] if best else None)
        if outcome.outcome != Outcome.OK:
            raise optuna.TrialPruned(outcome.reason)  # TPE ranks pruned trials below every measured one
        return outcome.time_ms

    def stop_when_spent(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        # Configs the constraints reject cost nothing (never compiled), nor do repeats (cached):
        # the budget counts distinct configs evaluated.
        if _done(study, plan):
            study.stop()

    if _done(study, plan):
        return 0
    started = time.perf_counter()
    if pool is not None:
        _run_in_batches(study, plan, objective, evaluator, pool)
    else:
        study.optimize(objective, n_trials=plan.max_trials, timeout=plan.timeout, callbacks=[stop_when_spent], catch=())
    evaluator.seconds["search"] = evaluator.seconds.get("search", 0.0) + time.perf_counter() - started
    return len(ran)


def _done(study: optuna.Study, plan: StudyPlan) -> bool:
    """The budget is spent and no retry of a dead worker's trial is still queued: a retry is run even past the
    budget (its config is usually known by then, and costs nothing), so that no trial is left unfinished."""
    if not budget_spent(study, plan):
        return False
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    return not any("failed_trial" in trial.system_attrs for trial in waiting)


def _run_in_batches(
    study: optuna.Study,
    plan: StudyPlan,
    objective: Callable[[optuna.Trial], float],
    evaluator: Evaluator,
    pool: CompilePool,
) -> None:
    """study.optimize's loop, a batch of trials at a time: ask, compile the new configs in parallel, then
    verify and time each in order. The sampler's constant liar keeps a batch's proposals apart."""
    deadline = None if plan.timeout is None else time.monotonic() + plan.timeout
    asked = 0
    while not budget_spent(study, plan) and asked < plan.max_trials:
        if deadline is not None and time.monotonic() > deadline:
            break
        left = plan.budget - evaluator.evaluated()
        trials = [study.ask() for _ in range(max(1, min(pool.workers, left)))]
        asked += len(trials)
        configs = {config_key(c): c for c in (evaluator.problem_config(t) for t in trials)}
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
