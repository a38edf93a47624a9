"""Planning a study: what it measures (`StudyPlan`, kept in the study for every worker that joins), the options a
search takes (`SearchOptions`), the GPU it runs on, and the Optuna study itself with its first trials queued."""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
import sqlalchemy.exc
import torch

from autotune import gpu
from autotune.db import ConfigStore
from autotune.db.connect import masked_url
from autotune.engine import isolation
from autotune.engine.outcome import TrialOutcome, evaluated
from autotune.engine.precompile import importable_name
from autotune.engine.warm_starts import bucket_failures, cold_starts, warm_starts
from autotune.gate.verify import KnownFailure, VerifyResult
from autotune.identity import RowKey
from autotune.runtime import registry
from autotune.space import Config, Problem
from autotune.spec import DTYPE_NAMES, KernelSpec, dtype_from_name, shape_label

SAMPLERS = ("tpe", "gp", "random", "grid")
MAX_TRIALS_PER_EVALUATION = 4
"""Bound on trials per distinct evaluation. Rejected configs and repeats cost no GPU time but do cost
sampler time: on the H100, TPE on softmax's conditional space asked for repeats so often that a
30-evaluation budget ran to ~500 trials in 3 minutes; a converged sampler repeats itself, so stop."""
HEARTBEAT_S = 10
"""A worker records a heartbeat for its running trial this often (server storages); a trial whose
heartbeat is GRACE_HEARTBEATS intervals old is failed by whichever worker notices, and retried."""
GRACE_HEARTBEATS = 3
MAX_RETRIES = 2
"""A trial whose worker died is run again at most this many times (a config that kills every worker stops)."""
PLAN_ATTR = "autotune"


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """How a search runs: its budget, sampler and gate sizes, and what it tells as it goes.

    Args:
        gpu_name: the GPU the search must run on ('auto': whatever is here).
        trials: distinct configs to evaluate (configs the constraints reject and repeats cost nothing).
        timeout: seconds after which the study stops asking for trials.
        examples: problems each trial's config is verified on; final_examples: the winner's re-check.
        max_numel: the largest problem drawn (default: small under the interpreter).
        isolate: evaluate configs in a worker process (default: on a GPU, or with trial_timeout).
        warm_start: configs tried right after the default and the bucket's stored best, before any guess of ours.
        cold: start from the space alone (its default and its own starts): no database's rows, to measure
            what the search finds by itself.
        on_trial: hears each trial (its outcome, the best time so far); on_final_check each re-check of
            a winner (config, result, seconds)."""

    gpu_name: str = "auto"
    trials: int = 50
    timeout: float | None = None
    sampler: str = "tpe"
    seed: int = 0
    examples: int = 20
    final_examples: int = 100
    max_numel: int | None = None
    isolate: bool | None = None
    trial_timeout: float | None = None
    heartbeat_s: int = HEARTBEAT_S
    warm_start: Sequence[Config] = ()
    cold: bool = False
    on_trial: Callable[[TrialOutcome, float | None], None] | None = None
    on_final_check: Callable[[Config, VerifyResult, float], None] | None = None

    def __post_init__(self) -> None:
        def number(value: object, kinds: tuple[type, ...]) -> bool:
            return isinstance(value, kinds) and not isinstance(value, bool)

        for name in ("trials", "examples", "final_examples", "heartbeat_s", "max_numel"):
            value = getattr(self, name)
            if not (value is None and name == "max_numel") and not (number(value, (int,)) and value >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        # trial_timeout is checked where isolation is decided.
        if self.timeout is not None and not (number(self.timeout, (int, float)) and self.timeout > 0):
            raise ValueError(f"timeout must be a number of seconds > 0 (or None), got {self.timeout!r}")


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


def check_gpu(requested: str, *, isolated: bool = False) -> gpu.GPUInfo:
    """The GPU a search measures; it must be the one asked for ('auto' takes whatever is here).
    `isolated`: ask a worker process, so that this one never creates a CUDA context."""
    return gpu.require_gpu(
        requested,
        "a search measures the GPU it runs on: run it there, or pass --gpu auto",
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
        where = (
            "this machine's memory (the interpreter's device)" if info.is_interpreter else f"the {info.name}'s memory"
        )
        raise ValueError(
            f"{spec.name} {shape_label(problem)} in {DTYPE_NAMES[dtype]} needs at least {needed / 2**30:.1f} GiB (its "
            f"inputs and outputs, and their float64 copies for the reference), more than {where}: "
            f"{info.memory_bytes / 2**30:.1f} GiB"
        )


def study_budget(spec: KernelSpec, problem: Problem, sampler: str, trials: int) -> int:
    """Distinct configs a study of problem evaluates at most: `trials`, or with the grid sampler every config
    the constraints allow on it (problem as `spec.problem_for` gives it)."""
    return len(spec.space.grid_for(problem)) if sampler == "grid" else trials


def check_store(store: ConfigStore | None) -> None:
    """ValueError unless a search can keep its results in store (None: it stores nothing): checked before
    any study, not at its first result."""
    if store is None:
        return
    if store.readonly:
        raise ValueError(f"{store.where} is opened read-only: a search stores its results there; open it writable")
    if store.in_memory:
        raise ValueError(
            f"{store.where} is held in memory and lost when this process ends: a search stores its "
            "results in a file or a database server; pass a path or a server URL"
        )


def default_max_numel(info: gpu.GPUInfo) -> int:
    """Largest Hypothesis-drawn problem a trial verifies on: small under the interpreter."""
    return (1 << 14) if info.is_interpreter else (1 << 20)


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """An Optuna sampler by name: tpe, gp, random or grid (the whole space, constraints applied per trial)."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True, constant_liar=True)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":  # the study queues every valid config; the sampler only fills gaps
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"sampler {name!r} is not one of {list(SAMPLERS)}")


def row_key(spec: KernelSpec, info: gpu.GPUInfo, dtype: torch.dtype, problem: Problem) -> RowKey:
    """The database key a study of problem in dtype on this GPU searches for."""
    return RowKey(spec.name, spec.source_hash, info.name, DTYPE_NAMES[dtype], spec.bucket(problem))


def open_storage(url: str, *, heartbeat_s: int | None = None) -> optuna.storages.BaseStorage:
    """An Optuna storage: a SQLAlchemy URL (PostgreSQL, MySQL; several hosts) with heartbeats when asked,
    or a file path for Optuna's journal file (one host; no heartbeats: a supervisor retries for it)."""
    if not isinstance(url, str) or not url:
        raise ValueError(f"storage must be a SQLAlchemy URL or a journal file path, got {url!r}")
    if "://" not in url:
        folder = os.path.dirname(os.path.abspath(url))
        if not os.path.isdir(folder):
            raise ValueError(f"storage {url!r}: no folder {folder} to keep the journal file in")
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(url))
    heartbeats: dict[str, Any] = {}
    if heartbeat_s is not None:
        if heartbeat_s < 1:
            raise ValueError(f"heartbeat_s must be a whole number of seconds >= 1, got {heartbeat_s!r}")
        heartbeats = dict(
            heartbeat_interval=heartbeat_s,
            grace_period=GRACE_HEARTBEATS * heartbeat_s,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES),
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, **heartbeats)
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.OperationalError, ImportError) as exc:
        # No such dialect or driver (its extra not installed), no server there: the URL said, password masked.
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"storage {masked_url(url)}: {why}") from None


def plan_of(study: optuna.Study) -> StudyPlan:
    """The plan a study was created with; ValueError for a study `create_study` did not make."""
    attrs: Any = study.user_attrs.get(PLAN_ATTR)
    if not isinstance(attrs, dict):
        raise ValueError(f"study {study.study_name!r} was not created by autotune search (no {PLAN_ATTR!r} attribute)")
    return StudyPlan(**attrs)


def create_study(
    spec: KernelSpec,
    problem: Problem,
    dtype: torch.dtype,
    info: gpu.GPUInfo,
    options: SearchOptions,
    storage: optuna.storages.BaseStorage | str | None,
    store: ConfigStore | None,
) -> tuple[optuna.Study, StudyPlan]:
    """Create (or extend, with options.trials more evaluations) the study of problem in storage (None: in
    memory, for a search in this process), its plan kept in it and its first trials queued: the default,
    the stored best, options.warm_start, earlier and neighbouring winners (`warm_starts`), and with the
    grid sampler every config the constraints allow."""
    if options.sampler not in SAMPLERS:
        raise ValueError(f"sampler {options.sampler!r} is not one of {list(SAMPLERS)}")
    key = row_key(spec, info, dtype, problem)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=key.study_name(),
        storage=open_storage(storage) if isinstance(storage, str) else storage,
        sampler=make_sampler(options.sampler, options.seed),
        direction="minimize",
        load_if_exists=True,
    )
    grid = spec.space.grid_for(problem) if options.sampler == "grid" else []
    plan = StudyPlan(
        kernel=importable_name(spec) or spec.name,
        problem=json.loads(json.dumps(problem)),
        dtype=key.dtype,
        gpu=info.name,
        budget=len(grid) if grid else evaluated(study) + options.trials,
        sampler=options.sampler,
        seed=options.seed,
        examples=options.examples,
        max_numel=default_max_numel(info) if options.max_numel is None else options.max_numel,
        timeout=options.timeout,
        heartbeat_s=options.heartbeat_s,
        known_failures=[[p, seed] for p, seed in bucket_failures(store, key)],
    )
    if PLAN_ATTR in study.user_attrs and not plan_of(study).measures_like(plan):
        raise ValueError(f"study {key.study_name()!r} measures {plan_of(study)}, not {plan}: use another storage")
    given = [spec.space.validate(c) for c in options.warm_start]
    firsts = cold_starts(spec, problem, given) if options.cold else warm_starts(spec, store, key, problem, given)
    for config in [*firsts, *grid]:
        study.enqueue_trial(config, skip_if_exists=True)
    study.set_user_attr(PLAN_ATTR, dataclasses.asdict(plan))
    return study, plan


def shared_studies(storage: optuna.storages.BaseStorage) -> list[str]:
    """Names of the studies in storage that `create_study` made, oldest first."""
    return [s.study_name for s in storage.get_all_studies() if PLAN_ATTR in s.user_attrs]


def budget_spent(study: optuna.Study, plan: StudyPlan) -> bool:
    """Enough distinct configs evaluated, or so many trials asked that the sampler only repeats itself."""
    return evaluated(study) >= plan.budget or len(study.get_trials(deepcopy=False)) >= plan.max_trials
