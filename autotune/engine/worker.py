"""A worker: joins shared studies in an Optuna storage and runs their trials until each budget is spent.
Any number of workers, on any hosts with the study's GPU, run one study together."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import warnings
from collections.abc import Callable, Sequence

import optuna

from autotune.engine.search import Evaluator, TrialOutcome, check_gpu, make_sampler, record_outcome
from autotune.engine.studies import budget_spent, finished_outcomes, open_storage, plan_of, shared_studies

WORKER_ATTR = "worker"


def worker_id(pid: int | None = None) -> str:
    """How trials name the process that runs them: host and process id."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


def run_worker(
    storage: str,
    studies: Sequence[str] = (),
    *,
    index: int | None = None,
    on_trial: Callable[[str, TrialOutcome], None] | None = None,
) -> dict[str, int]:
    """Run trials of each named study (default: every shared study in storage), one after another, until
    its budget is spent or its time is up; returns the trials this worker ran, by study.

    `index` makes this worker's sampler seed differ from the other workers' (default: the process id)."""
    names = list(studies) or shared_studies(open_storage(storage))
    if not names:
        raise ValueError(f"no autotune study in {storage}: create one with `autotune search --storage`")
    return {name: _run_study(storage, name, os.getpid() if index is None else index, on_trial) for name in names}


def _run_study(storage: str, name: str, index: int, on_trial: Callable[[str, TrialOutcome], None] | None) -> int:
    try:
        plan = plan_of(optuna.load_study(study_name=name, storage=open_storage(storage)))
    except KeyError:
        raise ValueError(f"no study named {name!r} in {storage}") from None
    spec = plan.spec()
    check_gpu(plan.gpu)
    # Every worker draws the same Hypothesis problems (the plan's seed), but proposes its own configs.
    study = optuna.load_study(
        study_name=name, storage=open_storage(storage, heartbeat_s=plan.heartbeat_s),
        sampler=make_sampler(plan.sampler, spec, plan.seed + 1 + index),
    )
    if budget_spent(study, plan):
        return 0
    evaluator = Evaluator(spec, plan.problem, plan.torch_dtype, examples=plan.examples, seed=plan.seed, max_numel=plan.max_numel,
                          known_failures=plan.failures())
    me, ran = worker_id(), []

    def objective(trial: optuna.Trial) -> float:
        trial.set_user_attr(WORKER_ATTR, me)  # first: a supervisor finds a dead worker's trial by it
        config = spec.space.suggest(trial, plan.problem)
        key = json.dumps(config, sort_keys=True)
        known = finished_outcomes(study).get(key)  # evaluated by some worker already: nothing to measure
        if known is not None:
            outcome, examples = dataclasses.replace(known[0], number=trial.number), known[1]
        else:
            outcome = evaluator(config, trial.number)
            examples = evaluator.examples_passed.get(key, 0)
        record_outcome(trial, outcome)
        trial.set_user_attr("examples", examples)
        ran.append(trial.number)
        if on_trial:
            on_trial(name, outcome)
        if outcome.outcome != "ok":
            raise optuna.TrialPruned(outcome.reason)
        return outcome.time_ms

    def stop_when_spent(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        if budget_spent(study, plan):
            study.stop()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(objective, n_trials=plan.max_trials, timeout=plan.timeout, callbacks=[stop_when_spent], catch=())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # a dead worker's trial noticed only now still gets its retry queued
    return len(ran)
