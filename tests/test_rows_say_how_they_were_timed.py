"""A row says how its time was taken (`timing`): a CUDA-graph replay, do_bench of the call itself, or the
interpreter's wall clock. Rows timed before the search timed graph replays (afa2266) hold host time wherever a
call's host path outlasted the L2 clear, so two rows' times compare only when they were timed the same way."""

import sqlite3

import optuna
import pytest
import torch

import autotune.kernels.vector_add.add as vector_add
from autotune import db
from autotune.db import SCHEMA_VERSION, ConfigStore
from autotune.db.rows import TIMINGS
from autotune.engine.outcome import TrialOutcome, outcome_of, record_outcome
from autotune.engine.plan import SearchOptions
from autotune.engine.search import search
from autotune.runtime.query import stored_rows


def test_a_search_under_the_interpreter_stores_and_shows_wall_clock_timing(user_db):
    with ConfigStore(str(user_db)) as store:
        result = search(
            vector_add.SPEC,
            vector_add.parse_shape("5000"),
            torch.float32,
            SearchOptions(trials=3, examples=3, final_examples=3),
            store=store,
        )
        [row] = store.best_rows(kernel="vector_add")
    assert result.best_timing == row.timing == "wall"
    assert all(t.timing == "wall" for t in result.trials if t.outcome == "ok")
    [shown] = stored_rows(vector_add.SPEC, db_url=str(user_db))
    assert shown["timing"] == "wall"


def test_a_shared_studys_trial_keeps_how_it_was_timed():
    study = optuna.create_study()
    trial = study.ask()
    record_outcome(trial, TrialOutcome(trial.number, {"BLOCK_SIZE": 256}, "ok", time_ms=0.5, timing="graph"))
    study.tell(trial, 0.5)
    assert outcome_of(study.trials[0]).timing == "graph"


def test_a_version_2_database_gains_an_empty_timing_column(tmp_path):
    path = tmp_path / "v2.sqlite"
    with ConfigStore(str(path)) as store:
        store.record_best(
            db.BestRow(
                kernel="vector_add",
                source_hash="abc",
                gpu="H100",
                device_name="test",
                dtype="fp32",
                bucket="n=8192",
                config_json='{"BLOCK_SIZE": 256}',
                problem_json="{}",
                time_ms=0.5,
                timing="graph",
                examples_verified=4,
                triton_version="x",
                torch_version="y",
            )
        )
    conn = sqlite3.connect(path)
    with conn:  # back to version 2: the column did not exist
        conn.execute("ALTER TABLE best_configs DROP COLUMN timing")
        conn.execute("UPDATE schema_info SET version = 2")
    conn.close()
    with ConfigStore(str(path), readonly=True) as store:
        assert store.best_rows()[0].timing is None
    with ConfigStore(str(path)) as store:
        assert store.best_rows()[0].timing is None  # not recorded: nothing is made up
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT version FROM schema_info").fetchall() == [(SCHEMA_VERSION,)]
        assert "timing" in {r[1] for r in conn.execute("PRAGMA table_info(best_configs)")}
    finally:
        conn.close()


def test_every_shipped_row_says_how_it_was_timed():
    with ConfigStore(str(db.shipped_path()), readonly=True) as store:
        rows = store.best_rows()
    assert {row.timing for row in rows} <= set(TIMINGS) - {"wall"}
    # The graph timing landed between the twenty-second and twenty-third sessions' device calls.
    assert all(row.timing == "graph" for row in rows if row.created_at.isoformat() >= "2026-11-25T02")
    assert all(row.timing == "do_bench" for row in rows if row.created_at.isoformat() < "2026-11-25T02")


@pytest.mark.gpu
def test_a_search_on_the_gpu_stores_graph_timing(user_db):
    with ConfigStore(str(user_db)) as store:
        search(
            vector_add.SPEC,
            vector_add.parse_shape("1048576"),
            torch.float32,
            SearchOptions(trials=2, examples=3, final_examples=3),
            store=store,
        )
        [row] = store.best_rows(kernel="vector_add")
    assert row.timing == "graph"
