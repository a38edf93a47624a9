"""Shared studies: one search study in an Optuna storage that several worker processes, on one host or
many, run trials of. Everything a worker needs to join lives in the study's user attributes; the
budget counts distinct configs evaluated by all workers together; the storage is the only channel."""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence
from typing import Any

import optuna
import torch

from autotune.runtime import registry
from autotune.db import ConfigStore
from autotune.engine.precompile import importable_name
from autotune.engine.search import (
    MAX_TRIALS_PER_EVALUATION,
    SAMPLERS,
    TrialOutcome,
    bucket_failures,
    check_request,
    default_max_numel,
    outcome_of,
    study_name,
    warm_starts,
)
from autotune.space import Config, Problem
from autotune.spec import DTYPE_NAMES, KernelSpec, dtype_from_name
from autotune.gate.verify import KnownFailure

HEARTBEAT_S = 10
"""A worker records a heartbeat for its running trial this often (server storages); a trial whose
heartbeat is GRACE_HEARTBEATS intervals old is failed by whichever worker notices, and retried."""
GRACE_HEARTBEATS = 3
MAX_RETRIES = 2
"""A trial whose worker died is run again at most this many times (a config that kills every worker stops)."""
PLAN_ATTR = "autotune"
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


@dataclasses.dataclass(frozen=True)
class StudyPlan:
    """What a study measures and how long it runs: kept in the study, read by every worker that joins."""

    kernel: str  # registry name or module:attr, importable by a fresh process
    problem: Problem
    dtype: str
    gpu: str  # canonical GPU name: a worker on another GPU refuses to join
    budget: int  # distinct configs evaluated, all workers together
    sampler: str
    seed: int
    examples: int
    max_numel: int
    timeout: float | None
    heartbeat_s: int
    known_failures: list = dataclasses.field(default_factory=list)  # [problem, seed]: the bucket's recorded failures

    def failures(self) -> list[KnownFailure]:
        """The bucket's recorded failures as verify takes them: (problem, seed of its inputs)."""
        return [(problem, seed) for problem, seed in self.known_failures]

    @property
    def max_trials(self) -> int:
        return self.budget * MAX_TRIALS_PER_EVALUATION

    @property
    def torch_dtype(self) -> torch.dtype:
        return dtype_from_name(self.dtype)

    def spec(self) -> KernelSpec:
        return registry.get(self.kernel)

    def measures_like(self, other: StudyPlan) -> bool:
        """True if trials of the two plans measured the same thing (budgets and time limits aside)."""
        same = ("kernel", "problem", "dtype", "gpu", "seed", "examples", "max_numel")
        return all(getattr(self, k) == getattr(other, k) for k in same)


def open_storage(url: str, *, heartbeat_s: int | None = None) -> optuna.storages.BaseStorage:
    """An Optuna storage: a SQLAlchemy URL (PostgreSQL, MySQL; several hosts) with heartbeats when asked,
    or a file path for Optuna's journal file (one host; no heartbeats: a supervisor retries for it)."""
    if not isinstance(url, str) or not url:
        raise ValueError(f"storage must be a SQLAlchemy URL or a journal file path, got {url!r}")
    if "://" not in url:
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(url))
    if heartbeat_s is None:
        return optuna.storages.RDBStorage(url)
    if heartbeat_s < 1:
        raise ValueError(f"heartbeat_s must be a whole number of seconds >= 1, got {heartbeat_s!r}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(
            url,
            heartbeat_interval=heartbeat_s,
            grace_period=GRACE_HEARTBEATS * heartbeat_s,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES),
        )


def plan_of(study: optuna.Study) -> StudyPlan:
    """The plan a study was created with; ValueError for a study `create_shared_study` did not make."""
    attrs: Any = study.user_attrs.get(PLAN_ATTR)
    if not isinstance(attrs, dict):
        raise ValueError(f"study {study.study_name!r} was not created by autotune search (no {PLAN_ATTR!r} attribute)")
    return StudyPlan(**attrs)


def create_shared_study(
    spec: KernelSpec,
    problem: Problem,
    dtype: torch.dtype,
    storage: str,
    *,
    gpu_name: str = "auto",
    trials: int = 50,
    timeout: float | None = None,
    sampler: str = "tpe",
    store: ConfigStore | None = None,
    seed: int = 0,
    examples: int = 20,
    max_numel: int | None = None,
    heartbeat_s: int = HEARTBEAT_S,
    warm_start: Sequence[Config] = (),
) -> str:
    """Create (or extend, with `trials` more evaluations) the study of problem in storage, warm-started
    like a one-process search (`warm_start`: configs tried first too); returns its name, all a worker needs
    besides the storage."""
    info = check_request(spec, problem, dtype, gpu_name)
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler {sampler!r} is not one of {list(SAMPLERS)}")
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    kernel = importable_name(spec)
    if kernel is None:
        raise ValueError(f"kernel {spec.name!r} cannot be imported by a worker process: define it in a module")
    name = study_name(spec, info.name, dtype, spec.bucket(problem))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=open_storage(storage), direction="minimize", load_if_exists=True)
    grid = spec.space.grid_for(problem) if sampler == "grid" else []
    plan = StudyPlan(
        kernel=kernel, problem=json.loads(json.dumps(problem)), dtype=DTYPE_NAMES[dtype], gpu=info.name,
        budget=len(grid) if grid else evaluated(study) + trials, sampler=sampler, seed=seed, examples=examples,
        max_numel=default_max_numel(info) if max_numel is None else max_numel, timeout=timeout, heartbeat_s=heartbeat_s,
        known_failures=[[p, seed] for p, seed in bucket_failures(store, spec, info.name, dtype, spec.bucket(problem))],
    )
    if PLAN_ATTR in study.user_attrs and not plan_of(study).measures_like(plan):
        raise ValueError(f"study {name!r} in {storage} measures {plan_of(study)}, not {plan}: use another storage")
    for config in [*warm_starts(spec, store, info.name, dtype, spec.bucket(problem), problem),
                   *(spec.space.validate(c) for c in warm_start), *grid]:
        study.enqueue_trial(config, skip_if_exists=True)
    study.set_user_attr(PLAN_ATTR, dataclasses.asdict(plan))
    return name


def shared_studies(storage: optuna.storages.BaseStorage) -> list[str]:
    """Names of the studies in storage that `create_shared_study` made, oldest first."""
    return [s.study_name for s in storage.get_all_studies() if PLAN_ATTR in s.user_attrs]


def finished_outcomes(study: optuna.Study) -> dict[str, tuple[TrialOutcome, int]]:
    """Each config evaluated in the study so far (any worker), by its JSON key: its outcome and how many
    examples it passed."""
    found: dict[str, tuple[TrialOutcome, int]] = {}
    for trial in study.get_trials(deepcopy=False, states=FINISHED):
        outcome = outcome_of(trial)
        if outcome is not None:
            found.setdefault(json.dumps(outcome.config, sort_keys=True), (outcome, trial.user_attrs.get("examples", 0)))
    return found


def evaluated(study: optuna.Study) -> int:
    """Distinct configs compiled and checked in the study (configs the constraints reject cost nothing)."""
    return sum(outcome.outcome != "invalid" for outcome, _ in finished_outcomes(study).values())


def budget_spent(study: optuna.Study, plan: StudyPlan) -> bool:
    """Enough distinct configs evaluated, or so many trials asked that the sampler only repeats itself."""
    return evaluated(study) >= plan.budget or len(study.get_trials(deepcopy=False)) >= plan.max_trials
