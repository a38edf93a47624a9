"""A worker: joins shared studies in an Optuna storage and runs their trials until each budget is spent.
Any number of workers, on any hosts with the study's GPU, run one study together."""

from __future__ import annotations

import os
import socket
import warnings
from collections.abc import Callable, Sequence

import optuna

from autotune.engine.evaluate import Evaluator
from autotune.engine.outcome import TrialOutcome
from autotune.engine.plan import check_gpu, make_sampler, open_storage, plan_of, shared_studies
from autotune.engine.study import run_trials


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
        study_name=name,
        storage=open_storage(storage, heartbeat_s=plan.heartbeat_s),
        sampler=make_sampler(plan.sampler, plan.seed + 1 + index),
    )
    evaluator = Evaluator(
        spec,
        plan.problem,
        plan.torch_dtype,
        examples=plan.examples,
        seed=plan.seed,
        max_numel=plan.max_numel,
        known_failures=plan.failures(),
    )
    ran = run_trials(
        study,
        plan,
        evaluator,
        worker=worker_id(),
        on_trial=None if on_trial is None else lambda outcome, _best: on_trial(name, outcome),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # a dead worker's trial noticed only now still gets its retry queued
    return ran
