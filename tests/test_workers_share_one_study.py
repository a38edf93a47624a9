"""Several worker processes run one search study through a shared Optuna storage (a real PostgreSQL
server, or a journal file): no trial lost or run twice, the budget met, one best row stored, and a
worker killed mid-trial costs nothing but a retry."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import torch
from click.testing import CliRunner
from worker_kernels import GATHER_ADD, GATHER_ENV, HANG_ADD, HANG_ENV

import autotune.kernels.vector_add.add as vector_add
from autotune import gpu
from autotune.cli import main
from autotune.db import ConfigStore
from autotune.engine.distributed import conclude_shared, create_shared_study, search_parallel
from autotune.engine.outcome import evaluated
from autotune.engine.plan import GRACE_HEARTBEATS, SearchOptions, open_storage

PROBLEM = vector_add.parse_shape("5000")
State = optuna.trial.TrialState
TESTS = os.path.dirname(__file__)
HEARTBEAT = 2


def start_worker(storage: str, study: str, index: int, **env: str) -> subprocess.Popen:
    """`autotune worker` in a fresh interpreter that imports the test kernels as a user's would be."""
    path = os.pathsep.join([TESTS, os.path.dirname(TESTS), os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotune",
            "worker",
            "--storage",
            storage,
            "--study",
            study,
            "--worker-index",
            str(index),
        ],
        env={**os.environ, "PYTHONPATH": path, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen, timeout: float = 180) -> str:
    out, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, out
    return out


def wait_for_pid(path: Path, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.1)
    raise AssertionError(f"no launch hung within {timeout} s")


def trials_of(storage: str, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=open_storage(storage)).get_trials()


def assert_each_trial_once_and_finished(trials: list[optuna.trial.FrozenTrial]) -> None:
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    assert not [t.number for t in trials if t.state in (State.RUNNING, State.WAITING)]


def test_three_workers_on_one_postgres_study_lose_no_trial_and_store_one_best(postgres_url, tmp_path):
    name = create_shared_study(GATHER_ADD, PROBLEM, torch.float32, postgres_url, SearchOptions(trials=6, examples=3))
    (tmp_path / "gather").mkdir()
    workers = [start_worker(postgres_url, name, i, **{GATHER_ENV: f"{tmp_path / 'gather'}:3"}) for i in range(3)]
    for w in workers:
        finish(w)

    trials = trials_of(postgres_url, name)
    assert_each_trial_once_and_finished(trials)
    assert all(t.state in (State.COMPLETE, State.PRUNED) for t in trials)
    assert len({t.user_attrs["worker"] for t in trials}) == 3  # each worker ran trials of the one study
    configs = [json.dumps(t.user_attrs["config"], sort_keys=True) for t in trials]
    assert 6 <= len(set(configs)) <= 6 + 2  # the budget, overshot at most by the other workers' trials in flight

    with ConfigStore(str(tmp_path / "autotune.sqlite")) as store:
        result = conclude_shared(postgres_url, name, store=store, final_examples=5)
        rows = store.best_rows(kernel="gather_add")
        stored = store.trials(study=name)
    assert result.stored and result.evaluations == len(set(configs))
    assert len(rows) == 1 and rows[0].config == result.best_config and rows[0].time_ms == result.best_ms
    assert rows[0].time_ms == min(t.value for t in trials if t.state == State.COMPLETE)
    assert sorted(t.number for t in stored) == sorted(t.number for t in trials)


def test_a_worker_killed_mid_trial_is_retried_by_the_others(postgres_url, tmp_path):
    # A 2 s heartbeat: the killed worker's trial is stale 6 s after its last beat (a live one, even on a
    # loaded machine, never is).
    name = create_shared_study(
        HANG_ADD, PROBLEM, torch.float32, postgres_url, SearchOptions(sampler="grid", examples=3, heartbeat_s=HEARTBEAT)
    )
    hang = tmp_path / "hung"
    victim = start_worker(postgres_url, name, 0, **{HANG_ENV: str(hang)})
    assert wait_for_pid(hang) == victim.pid
    [running] = [t for t in trials_of(postgres_url, name) if t.state == State.RUNNING]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    time.sleep(GRACE_HEARTBEATS * HEARTBEAT + 1)
    survivors = [start_worker(postgres_url, name, i, **{HANG_ENV: str(hang)}) for i in (1, 2)]
    for w in survivors:
        finish(w)

    trials = {t.number: t for t in trials_of(postgres_url, name)}
    assert_each_trial_once_and_finished(list(trials.values()))
    assert trials[running.number].state == State.FAIL
    [retry] = [t for t in trials.values() if t.system_attrs.get("failed_trial") == running.number]
    assert retry.state == State.COMPLETE and retry.params == running.params
    grid = {json.dumps(c, sort_keys=True) for c in HANG_ADD.space.grid_for(PROBLEM)}
    assert {
        json.dumps(t.user_attrs["config"], sort_keys=True) for t in trials.values() if t.state != State.FAIL
    } == grid
    with ConfigStore(str(tmp_path / "autotune.sqlite")) as store:
        assert conclude_shared(postgres_url, name, store=store, final_examples=5).stored
        assert len(store.best_rows(kernel="hang_add")) == 1


def test_a_local_worker_killed_mid_trial_is_restarted_and_its_trial_retried(tmp_path, monkeypatch):
    # A journal file has no heartbeat: the supervisor of the local workers notices the death itself.
    hang = tmp_path / "hung"
    monkeypatch.setenv(HANG_ENV, str(hang))
    killer = threading.Thread(target=lambda: os.kill(wait_for_pid(hang), signal.SIGKILL))
    killer.start()
    storage = str(tmp_path / "studies.journal")
    with ConfigStore(str(tmp_path / "autotune.sqlite")) as store:
        [result] = search_parallel(
            HANG_ADD,
            [(PROBLEM, torch.float32)],
            SearchOptions(sampler="grid", examples=3, final_examples=5),
            workers=2,
            storage=storage,
            store=store,
        )
        rows = store.best_rows(kernel="hang_add")
    killer.join()

    trials = trials_of(storage, result.study_name)
    assert_each_trial_once_and_finished(trials)
    [failed] = [t for t in trials if t.state == State.FAIL]
    [retry] = [t for t in trials if t.system_attrs.get("failed_trial") == failed.number]
    assert retry.state == State.COMPLETE and retry.params == failed.params
    assert result.evaluations == len(HANG_ADD.space.grid_for(PROBLEM)) == 4
    assert len(rows) == 1 and rows[0].config == result.best_config


def test_cli_search_with_two_workers_gives_what_one_process_gives(tmp_path, monkeypatch):
    args = [
        "search",
        "vector_add",
        "--dtype",
        "fp32",
        "--shape",
        "5000",
        "--trials",
        "5",
        "--examples",
        "3",
        "--format",
        "json",
    ]
    results = {}
    for label, extra in (("one", []), ("two", ["--workers", "2"])):
        db = tmp_path / f"{label}.sqlite"
        run = CliRunner().invoke(main, [*args, *extra, "--db", str(db)])
        assert run.exit_code == 0, run.output
        [row] = json.loads(run.stdout)
        with ConfigStore(str(db), readonly=True) as store:
            [best] = store.best_rows(kernel="vector_add")
            results[label] = (row, best, store.trials(kernel="vector_add"))

    (one, one_best, one_trials), (two, two_best, two_trials) = results["one"], results["two"]
    assert set(one) == set(two) and two["stored"] is True
    assert (
        (two_best.gpu, two_best.dtype, two_best.bucket)
        == (one_best.gpu, one_best.dtype, one_best.bucket)
        == (gpu.CPU_INTERPRETER, "fp32", "n=8192")
    )
    assert json.loads(two["best config"]) == two_best.config == vector_add.SPACE.validate(two_best.config)
    assert two_best.examples_verified >= one_best.examples_verified > 0
    assert two_best.default_time_ms and two_best.baseline_time_ms
    for trials in (one_trials, two_trials):
        assert len({t.config_json for t in trials if t.outcome != "invalid"}) >= 5  # the budget, either way
        assert json.loads(trials[0].config_json) == vector_add.SPACE.default  # the same warm start


def test_bad_parallel_requests_fail_before_any_process_starts(tmp_path):
    with pytest.raises(ValueError, match="there is no GPU here"):
        search_parallel(vector_add.SPEC, [(PROBLEM, torch.float32)], gpus=[0])
    with pytest.raises(ValueError, match="workers must be >= 1"):
        search_parallel(vector_add.SPEC, [(PROBLEM, torch.float32)], workers=0)
    with pytest.raises(ValueError, match="heartbeat_s"):
        open_storage("sqlite:///" + str(tmp_path / "o.sqlite"), heartbeat_s=0)
    run = CliRunner().invoke(main, ["worker", "--storage", str(tmp_path / "empty.journal")])
    assert run.exit_code != 0 and "no autotune study" in run.output and "Traceback" not in run.output
    storage = str(tmp_path / "s.journal")
    name = create_shared_study(vector_add.SPEC, PROBLEM, torch.float32, storage, SearchOptions(trials=2))
    with pytest.raises(ValueError, match="use another storage"):
        create_shared_study(vector_add.SPEC, PROBLEM, torch.float32, storage, SearchOptions(trials=2, examples=7))
    assert evaluated(optuna.load_study(study_name=name, storage=open_storage(storage))) == 0


def test_a_shared_study_queues_the_same_first_trials_as_a_one_process_search(tmp_path, user_db):
    # user_db: no stored row, so the runtime serves the default, and no served config joins the first trials
    storage, given = str(tmp_path / "w.journal"), {"BLOCK_SIZE": 256, "num_warps": 2, "num_stages": 1}
    name = create_shared_study(
        vector_add.SPEC, PROBLEM, torch.float32, storage, SearchOptions(trials=3, warm_start=[given])
    )
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    queued = [
        t.params or t.system_attrs["fixed_params"] for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    ]
    assert queued == [vector_add.SPACE.default, given]


def test_cli_shared_search_prints_each_faulty_trial_with_its_config_and_reason(tmp_path):
    args = [
        "search",
        "wrong_kernels:STATIC_FAIL_ADD",
        "--dtype",
        "fp32",
        "--shape",
        "5000",
        "--trials",
        "3",
        "--examples",
        "2",
        "--warm-start",
        '{"BLOCK_SIZE": 256}',
        "--workers",
        "2",
        "--db",
        str(tmp_path / "db.sqlite"),
    ]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    assert re.search(
        r'trial \d+ \{"BLOCK_SIZE": 256[^}]*\}: (compile_)?error: .*cannot be built with BLOCK_SIZE=256', run.stderr
    ), run.stderr
