"""Search with several worker processes on one host: one per GPU (or N under the interpreter), all
running the same shared studies through an Optuna storage; then the best of each study is
re-verified and stored exactly as a one-process search does."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import optuna
import torch

from autotune import gpu
from autotune.db import ConfigStore
from autotune.engine.evaluate import Evaluator
from autotune.engine.outcome import evaluated
from autotune.engine.plan import (
    MAX_RETRIES,
    SearchOptions,
    budget_spent,
    check_gpu,
    check_request,
    check_store,
    create_study,
    open_storage,
    plan_of,
)
from autotune.engine.precompile import importable_name
from autotune.engine.result import SearchResult, conclude_study
from autotune.engine.study import WORKER_ATTR
from autotune.engine.worker import worker_id
from autotune.space import Problem
from autotune.spec import KernelSpec

log = logging.getLogger(__name__)
POLL_S = 0.5
MAX_RESTARTS = 2
"""A worker slot whose process dies is started again at most this many times."""


def worker_devices(workers: int = 0, gpus: Sequence[int] | None = None) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES for each local worker: one GPU each (`gpus` by index, else the first
    `workers`), or None for each of `workers` processes under the interpreter."""
    if gpus:
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"gpus must be distinct device indices, got {list(gpus)}")
        wanted = list(gpus)
    elif workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    elif gpu.interpreter_active():
        return [None] * workers
    else:
        wanted = list(range(workers))
    if gpu.interpreter_active():
        raise ValueError("gpus: there is no GPU here (Triton interpreter); use workers=N for N processes")
    count = torch.cuda.device_count()
    if any(not 0 <= g < count for g in wanted):
        raise ValueError(f"gpus: device indices must be in 0..{count - 1} on this machine, got {wanted}")
    # Indices are this process's; a child sees only its own GPU, named the way the parent's environment names it.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = visible.split(",") if visible else [str(i) for i in range(count)]
    return [names[g] for g in wanted]


def search_parallel(
    spec: KernelSpec,
    jobs: Sequence[tuple[Problem, torch.dtype]],
    options: SearchOptions = SearchOptions(),
    *,
    workers: int = 1,
    gpus: Sequence[int] | None = None,
    storage: str | None = None,
    store: ConfigStore | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[SearchResult]:
    """Search each (problem, dtype) of jobs with local worker processes on shared studies in `storage`
    (default: a journal file in a temporary directory); workers on other hosts may join the same studies
    (`autotune worker`). Returns one result per job, like `search`'s."""
    check_store(store)
    devices = worker_devices(workers, gpus)
    with tempfile.TemporaryDirectory(prefix="autotune-") as tmp:
        url = storage or os.path.join(tmp, "studies.journal")
        names = [create_shared_study(spec, problem, dtype, url, options, store=store) for problem, dtype in jobs]
        started = time.perf_counter()
        _Supervisor(url, names, devices, on_progress).run()
        seconds = time.perf_counter() - started
        return [
            conclude_shared(url, name, store=store, final_examples=options.final_examples, seconds=seconds)
            for name in names
        ]


def create_shared_study(
    spec: KernelSpec,
    problem: Problem,
    dtype: torch.dtype,
    storage: str,
    options: SearchOptions = SearchOptions(),
    *,
    store: ConfigStore | None = None,
) -> str:
    """Create (or extend, with options.trials more evaluations) the study of problem in storage, for worker
    processes to run; returns its name, all a worker needs besides the storage."""
    if importable_name(spec) is None:
        raise ValueError(f"kernel {spec.name!r} cannot be imported by a worker process: define it in a module")
    problem = spec.problem_for(problem, dtype)
    info = check_request(spec, problem, dtype, options.gpu_name)
    study, _ = create_study(spec, problem, dtype, info, options, storage, store)
    return study.study_name


def conclude_shared(
    storage: str, name: str, *, store: ConfigStore | None = None, final_examples: int = 100, seconds: float = 0.0
) -> SearchResult:
    """A shared study's result as a one-process search gives it: its trials, the default and PyTorch timed,
    the best re-verified here with more examples and stored with every finished trial."""
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    plan = plan_of(study)
    info = check_gpu(plan.gpu)
    evaluator = Evaluator(
        plan.spec(),
        plan.problem,
        plan.torch_dtype,
        examples=plan.examples,
        seed=plan.seed,
        max_numel=plan.max_numel,
        known_failures=plan.failures(),
    )
    evaluator.seconds["search"] = seconds
    return conclude_study(study, plan, evaluator, info, store=store, final_examples=final_examples)


@dataclass
class _Slot:
    device: str | None
    process: subprocess.Popen | None = None
    restarts: int = 0


class _Supervisor:
    """Starts one `autotune worker` process per slot and watches them. A worker that dies leaves its
    running trial to Optuna's heartbeat on a server storage; a journal file has none, so the
    supervisor fails that trial itself and queues its retry with Optuna's own retry callback."""

    def __init__(self, storage: str, names: list[str], devices: list[str | None], on_progress) -> None:
        self.storage, self.names, self.on_progress = storage, names, on_progress
        self.slots = [_Slot(d) for d in devices]
        self._storage = open_storage(storage)
        self.studies = [optuna.load_study(study_name=n, storage=self._storage) for n in names]
        self.plans = [plan_of(s) for s in self.studies]

    def run(self) -> None:
        try:
            for index, slot in enumerate(self.slots):
                self._start(index, slot)
            while any(slot.process is not None for slot in self.slots):
                time.sleep(POLL_S)
                self._report()
                for index, slot in enumerate(self.slots):
                    self._check(index, slot)
            self._report()
        finally:
            for slot in self.slots:
                if slot.process is not None:
                    slot.process.kill()
                    slot.process.wait()

    def _start(self, index: int, slot: _Slot) -> None:
        env = dict(os.environ)
        # A kernel given as module:attr must import in the worker as it did here.
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        if slot.device is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot.device
        command = [sys.executable, "-m", "autotune", "worker", "--storage", self.storage, "--worker-index", str(index)]
        for name in self.names:
            command += ["--study", name]
        # Its stdout would mix with this process's output (a table, JSON); what matters goes to stderr.
        slot.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def _check(self, index: int, slot: _Slot) -> None:
        process = slot.process
        if process is None or process.poll() is None:
            return
        slot.process = None
        if process.returncode == 0:
            return
        retried = self._retry_trials_of(worker_id(process.pid))
        unfinished = not all(budget_spent(s, p) for s, p in zip(self.studies, self.plans))
        if unfinished and slot.restarts < MAX_RESTARTS:
            slot.restarts += 1
            log.warning(
                "worker %d exited with %d; %d trial(s) queued again; restarting it", index, process.returncode, retried
            )
            self._start(index, slot)

    def _retry_trials_of(self, worker: str) -> int:
        """Fail the dead worker's running trials and queue each again, as Optuna's heartbeat would."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)
        count = 0
        storage = self._storage
        for study in self.studies:
            study_id = storage.get_study_id_from_name(study.study_name)
            for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                if trial.user_attrs.get(WORKER_ATTR) != worker:
                    continue
                trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
                try:
                    storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue  # a heartbeat check on another worker got there first
                retry(study, storage.get_trial(trial_id))
                count += 1
        return count

    def _report(self) -> None:
        if self.on_progress:
            done = sum(min(evaluated(s), p.budget) for s, p in zip(self.studies, self.plans))
            self.on_progress(done, sum(p.budget for p in self.plans))
