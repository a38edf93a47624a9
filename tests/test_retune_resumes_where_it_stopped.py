"""`autotune retune`: every kernel's presets in every dtype on this GPU within one budget; interrupted, a second
run continues where the first stopped and ends with rows for every kernel."""

import pytest
import torch
import user_kernels
from click.testing import CliRunner

from autotune import gpu
from autotune.cli import main
from autotune.db import ConfigStore
from autotune.engine import retune as retuning
from autotune.engine.plan import SearchOptions

KERNELS = [user_kernels.axpy.spec, user_kernels.scale_rows.spec]
OPTIONS = SearchOptions(trials=50, examples=3, final_examples=3)


def _run(store, budget_s=120.0, on_done=None):
    return retuning.retune(
        KERNELS, budget_s=budget_s, store=store, options=OPTIONS, dtypes=(torch.float32,), on_done=on_done
    )


def test_an_interrupted_retune_continues_where_it_stopped(user_db):
    def interrupt_after_the_first(outcome):
        if outcome.status == retuning.STORED:
            raise KeyboardInterrupt

    with ConfigStore(str(user_db)) as store:
        first = _run(store, on_done=interrupt_after_the_first)
        assert first.interrupted
        assert [(o.study.spec.name, o.status) for o in first.outcomes] == [
            ("axpy", retuning.STORED),
            ("scale_rows", retuning.NOT_RUN),
        ]
        assert {r.kernel for r in store.best_rows()} == {"axpy"}

        second = _run(store)
        assert not second.interrupted
        assert [(o.study.spec.name, o.status) for o in second.outcomes] == [
            ("axpy", retuning.KEPT),
            ("scale_rows", retuning.STORED),
        ]
        rows = store.best_rows(gpu=gpu.current_gpu().name)
    assert {(r.kernel, r.dtype, r.bucket) for r in rows} == {("axpy", "fp32", "n=4096"), ("scale_rows", "fp32", "n=64")}
    assert all(r.source_hash == {s.name: s for s in KERNELS}[r.kernel].source_hash for r in rows)


def test_a_spent_budget_leaves_the_rest_for_the_next_run(user_db):
    with ConfigStore(str(user_db)) as store:
        report = _run(store, budget_s=1e-3)  # the first study starts (one trial at least), then time is up
    assert [o.status for o in report.outcomes] == [retuning.STORED, retuning.NOT_RUN]
    assert report.outcomes[1].detail == "budget spent"


def test_each_study_gets_its_share_of_what_is_left(user_db, monkeypatch):
    timeouts = []

    def fake_search(spec, problem, dtype, options, **kwargs):
        timeouts.append(options.timeout)
        raise ValueError("not searched here")

    monkeypatch.setattr(retuning, "search", fake_search)
    with ConfigStore(str(user_db)) as store:
        report = _run(store, budget_s=100.0)
    assert [o.status for o in report.outcomes] == [retuning.FAILED, retuning.FAILED]
    assert 49 < timeouts[0] <= 50 and 98 < timeouts[1] <= 100  # half of the budget, then all that is left


def test_the_command_prints_one_summary_and_continues_a_finished_run(user_db):
    runner = CliRunner()
    args = [
        "retune",
        "--kernel",
        "user_kernels:axpy",
        "--kernel",
        "user_kernels:scale_rows",
        "--dtype",
        "fp32",
        "--budget",
        "2m",
        "--examples",
        "3",
        "--final-examples",
        "3",
    ]
    first = runner.invoke(main, args)
    assert first.exit_code == 0, first.output
    assert "2 stored, 0 kept" in first.output
    second = runner.invoke(main, args)
    assert second.exit_code == 0, second.output
    assert "0 stored, 2 kept" in second.output and second.stdout.count("already stored") == 2


def test_studies_take_turns_across_kernels_most_used_dtypes_first():
    """A budget too small for everything still leaves rows for every kernel: the plan goes kernel by kernel in
    turns, fp16 before fp32 within each."""
    studies = retuning.plan(KERNELS)
    assert [(s.spec.name, s.dtype) for s in studies] == [
        ("axpy", torch.float16),  # axpy runs in fp16 and fp32, scale_rows in fp32 only
        ("scale_rows", torch.float32),
        ("axpy", torch.float32),
    ]


@pytest.mark.parametrize("text, seconds", [("2h", 7200), ("20m", 1200), ("90s", 90), ("1h30m", 5400), ("45", 45)])
def test_budgets_read_as_durations(text, seconds):
    assert retuning.parse_budget(text) == seconds


def test_a_bad_budget_is_one_clear_line(user_db):
    result = CliRunner().invoke(main, ["retune", "--budget", "soon"])
    assert result.exit_code == 2 and "--budget" in result.output and "Traceback" not in result.output
