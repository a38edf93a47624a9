"""An isolated search meets configs that raise, fail to build, compute wrong, hang, kill their process and
(on a GPU) write out of bounds: it completes, records every trial with its reason and stores a good best."""

import dataclasses
import json
import multiprocessing
import re

import pytest
import torch
from click.testing import CliRunner
from fault_kernels import EXPECTED, FAULT_ADD, HANG_CRASH_ADD, MODES, ON_GPU

import autotune.kernels.vector_add.add as vector_add
from autotune import gpu
from autotune.cli import main
from autotune.db import ConfigStore
from autotune.engine import isolation
from autotune.engine.plan import SearchOptions
from autotune.engine.search import search

PROBLEM = vector_add.parse_shape("1000")
TRIAL_TIMEOUT = 30.0 if ON_GPU else 5.0  # a GPU worker compiles each config on its first launch
REASONS = {
    "raise": "RuntimeError: injected launch failure",
    "compile": "CompileTimeAssertionFailure" if ON_GPU else "injected compile failure",  # on a GPU: "at 1:4:" follows
    "wrong": r"error .* > budget",
    "hang": rf"no result within the {TRIAL_TIMEOUT:g} s limit: the worker was killed; a fresh worker",
    "exit": "the worker exited with code 3; a fresh worker takes the next config",
    "segv": "the worker was killed by signal SIGSEGV; a fresh worker",
    "oob": "CUDA error.*the worker's GPU context is lost",  # an illegal memory access, as the driver words it
}


def _evaluation_workers():
    return [p for p in multiprocessing.active_children() if p.name == isolation.WORKER_NAME]


def _search_faults(store=None, compile_workers=0, **options):
    return search(
        FAULT_ADD,
        PROBLEM,
        torch.float32,
        SearchOptions(sampler="grid", examples=3, final_examples=5, trial_timeout=TRIAL_TIMEOUT, **options),
        store=store,
        compile_workers=compile_workers,
    )


def _assert_every_fault_recorded(trials):
    by_mode = {t.config["mode"]: t for t in trials}
    assert len(trials) == len(MODES) and set(by_mode) == set(MODES)  # every config once, none lost
    for mode, trial in by_mode.items():
        assert trial.outcome == EXPECTED[mode], (mode, trial.outcome, trial.reason)
        if mode in REASONS:
            assert re.search(REASONS[mode], trial.reason), (mode, trial.reason)
        assert (trial.time_ms is not None) == (trial.outcome == "ok")
    return by_mode


def test_isolated_search_records_each_fault_with_its_reason_and_stores_the_fastest_good_config(user_db):
    cuda_before = torch.cuda.is_initialized()
    with ConfigStore(str(user_db)) as store:
        result = _search_faults(store)
        rows = store.best_rows(kernel="fault_add")
        stored = store.trials(kernel="fault_add")
    by_mode = _assert_every_fault_recorded(result.trials)
    assert by_mode["wrong"].example is not None  # the failing problem is kept with the trial
    assert sorted((json.loads(t.config_json)["mode"], t.outcome, t.reason) for t in stored) == sorted(
        (t.config["mode"], t.outcome, t.reason) for t in result.trials
    )
    # Good configs after each crash or hang still pass and get timed, by a fresh worker.
    assert by_mode["fast"].time_ms < by_mode["medium"].time_ms < by_mode["slow"].time_ms
    assert result.best_config == {"mode": "fast"} and result.default_ms == by_mode["medium"].time_ms
    assert result.baseline_ms is not None and result.examples_verified >= 5  # baseline and final check ran too
    assert len(rows) == 1 and rows[0].config == {"mode": "fast"} and result.stored
    # This process created no CUDA context (on a GPU: unless an earlier test did), and no worker outlives the search.
    assert torch.cuda.is_initialized() == cuda_before
    assert _evaluation_workers() == []


def test_studies_in_shared_workers_hand_their_worker_on_and_none_outlives_the_block(monkeypatch):
    def study(shape):
        result = search(
            vector_add.SPEC,
            vector_add.parse_shape(shape),
            torch.float32,
            SearchOptions(trials=1, examples=2, final_examples=2, trial_timeout=TRIAL_TIMEOUT),
        )
        assert result.best_config is not None and result.seconds["worker_start"] > 0
        return [p.pid for p in _evaluation_workers()]

    with isolation.shared_workers():
        first = study("1000")
        assert len(first) == 1  # kept, idle, for the next study
        assert study("3000") == first  # another problem, the same process
        monkeypatch.setenv("AUTOTUNE_TEST_MARK", "changed")  # a worker inherits the environment it started in
        fresh = study("1000")
        assert len(fresh) == 1 and fresh != first
    assert _evaluation_workers() == []


def test_cli_search_with_a_trial_timeout_and_compile_ahead_survives_a_hang_and_a_crash(user_db):
    # Under the interpreter compile-ahead workers run the configs too: the hang and the crash hit them first.
    args = [
        "search",
        "fault_kernels:HANG_CRASH_ADD",
        "--dtype",
        "fp32",
        "--shape",
        "1000",
        "--sampler",
        "grid",
        "--examples",
        "3",
        "--trial-timeout",
        f"{TRIAL_TIMEOUT:g}",
        "--compile-workers",
        "2",
        "--format",
        "json",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)[0]
    assert json.loads(row["best config"]) == {"mode": "fast"} and row["stored"] is True
    assert row["trials"] == "crashed:1 ok:2 timeout:1"
    # each fault is printed as it happens, with its config and why: the table only counts them
    assert re.search(r'trial \d+ \{"mode": "hang"\}: timeout: no result within', result.stderr), result.stderr
    assert re.search(
        r'trial \d+ \{"mode": "segv"\}: crashed: the worker was killed by signal SIGSEGV', result.stderr
    ), result.stderr
    assert int(re.search(r"(\d+) compiled ahead", result.stderr).group(1)) >= 1
    assert _evaluation_workers() == []


def test_isolation_is_on_by_default_only_where_it_protects_something():
    assert isolation.use_isolation(None, None, FAULT_ADD) is (not gpu.interpreter_active())
    assert isolation.use_isolation(None, 10, FAULT_ADD) is True  # a time limit needs a worker
    assert isolation.use_isolation(False, None, FAULT_ADD) is False
    assert isolation.worker_name(FAULT_ADD) == "fault_kernels:FAULT_ADD"


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"isolate": False, "trial_timeout": 5}, ValueError, "trial_timeout needs isolate=True"),
        ({"trial_timeout": 0}, ValueError, "trial_timeout must be a positive"),
        ({"trial_timeout": "5"}, TypeError, "trial_timeout must be a number"),
    ],
)
def test_bad_isolation_arguments_are_refused_before_any_worker_starts(kwargs, error, message):
    with pytest.raises(error, match=message):
        search(HANG_CRASH_ADD, PROBLEM, torch.float32, SearchOptions(trials=1, **kwargs))
    assert _evaluation_workers() == []


def test_a_kernel_no_worker_can_load_is_refused_when_isolation_is_asked_for():
    unloadable = dataclasses.replace(HANG_CRASH_ADD, name="unloadable", _hash=[])  # not a module attribute
    assert isolation.worker_name(unloadable) is None
    for asked in ({"isolate": True}, {"trial_timeout": 10}):
        with pytest.raises(ValueError, match="cannot be loaded by a worker process"):
            search(unloadable, PROBLEM, torch.float32, SearchOptions(trials=1, **asked))


def test_a_worker_reports_the_same_gpu_as_this_process():
    assert isolation.gpu_in_subprocess() == gpu.current_gpu()
