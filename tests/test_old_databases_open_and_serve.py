"""A database written before the verification columns existed (schema version 1) keeps working: read it is
read as it is (the runtime serves its rows and leaves the file alone), written it is upgraded in place."""

import contextlib
import hashlib
import json
import sqlite3

import pytest
import torch
from click.testing import CliRunner
from sqlalchemy import create_engine

import autotune.kernels.vector_add.add as vector_add
from autotune import db, gpu, runtime
from autotune.cli import main
from autotune.db import SCHEMA_VERSION, ConfigStore
from autotune.kernels import add

# The version-1 tables exactly as autotune created them (autotune/db/shipped.sqlite was such a file).
V1_SCHEMA = """
CREATE TABLE schema_info (id INTEGER NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (id));
CREATE TABLE best_configs (
    id INTEGER NOT NULL, kernel VARCHAR(128) NOT NULL, source_hash VARCHAR(128) NOT NULL, gpu VARCHAR(64) NOT NULL,
    device_name VARCHAR(256) NOT NULL, dtype VARCHAR(16) NOT NULL, bucket VARCHAR(256) NOT NULL, config TEXT NOT NULL,
    problem TEXT NOT NULL, time_ms FLOAT NOT NULL, default_time_ms FLOAT, baseline_time_ms FLOAT,
    examples_verified INTEGER NOT NULL, triton_version VARCHAR(64) NOT NULL, torch_version VARCHAR(64) NOT NULL,
    created_at DATETIME NOT NULL, PRIMARY KEY (id),
    CONSTRAINT uq_best_configs_key UNIQUE (kernel, source_hash, gpu, dtype, bucket)
);
CREATE INDEX ix_best_configs_kernel_gpu_dtype ON best_configs (kernel, gpu, dtype);
CREATE TABLE trials (
    id INTEGER NOT NULL, study VARCHAR(256) NOT NULL, kernel VARCHAR(128) NOT NULL, source_hash VARCHAR(128) NOT NULL,
    gpu VARCHAR(64) NOT NULL, dtype VARCHAR(16) NOT NULL, bucket VARCHAR(256) NOT NULL, number INTEGER NOT NULL,
    config TEXT NOT NULL, outcome VARCHAR(32) NOT NULL, reason TEXT, time_ms FLOAT, failing_example TEXT,
    created_at DATETIME NOT NULL, PRIMARY KEY (id)
);
INSERT INTO schema_info (id, version) VALUES (1, 1);
"""
STORED = {"BLOCK_SIZE": 256, "num_warps": 2, "num_stages": 3}
VERIFICATION_COLUMNS = {"verified_at", "verify_seed", "verify_examples", "verify_passed", "verify_failure"}


@contextlib.contextmanager
def _sqlite(path):
    conn = sqlite3.connect(path)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


@pytest.fixture
def cli_runner():
    return CliRunner()


@pytest.fixture
def old_db(tmp_path):
    """A version-1 database file holding one vector_add row for this machine's GPU."""
    path = tmp_path / "old.sqlite"
    with _sqlite(path) as conn:
        conn.executescript(V1_SCHEMA)
        conn.execute(
            "INSERT INTO best_configs (kernel, source_hash, gpu, device_name, dtype, bucket, config, problem, time_ms, "
            "examples_verified, triton_version, torch_version, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                "vector_add",
                vector_add.SPEC.source_hash,
                gpu.current_gpu().name,
                "test",
                "fp32",
                "n=8192",
                json.dumps(STORED),
                "{}",
                0.5,
                40,
                "3.6.0",
                "2.11.0",
                "2026-01-02 03:04:05.000000",
            ),
        )
    return path


def _columns(path) -> set[str]:
    with _sqlite(path) as conn:
        return {r[1] for r in conn.execute("PRAGMA table_info(best_configs)")}


def _launched(n: int) -> dict:
    x = torch.randn(n)
    with runtime.record_launches() as launches:
        assert torch.equal(add(x, x), x + x)
    return launches[0][1]


def test_read_only_an_old_database_is_read_as_it_is(old_db):
    before = hashlib.sha256(old_db.read_bytes()).hexdigest()
    with ConfigStore(str(old_db), readonly=True) as store:
        [row] = store.best_rows()
    assert (row.config, row.time_ms, row.examples_verified) == (STORED, 0.5, 40)
    assert row.verified_at is None and not row.flagged
    assert hashlib.sha256(old_db.read_bytes()).hexdigest() == before
    assert not _columns(old_db) & VERIFICATION_COLUMNS


def test_an_old_shipped_database_serves_its_rows(old_db, tmp_path, monkeypatch):
    old_db.chmod(0o444)
    monkeypatch.setattr(db, "shipped_path", lambda: old_db)
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "no-user-db-yet.sqlite"))
    runtime.clear_cache()
    assert _launched(5000) == STORED
    assert runtime.tuned(vector_add.SPEC).choice(torch.float32, "n=8192").source == "exact"
    runtime.clear_cache()


def test_an_old_user_database_serves_its_rows_and_is_left_as_it_is(old_db, monkeypatch):
    before = hashlib.sha256(old_db.read_bytes()).hexdigest()
    monkeypatch.setenv("AUTOTUNE_DB", str(old_db))
    runtime.clear_cache()
    assert _launched(5000) == STORED
    runtime.clear_cache()
    assert hashlib.sha256(old_db.read_bytes()).hexdigest() == before  # reading never upgrades
    assert not _columns(old_db) & VERIFICATION_COLUMNS


def test_a_writer_upgrades_an_old_database_in_place(old_db, cli_runner):
    with _sqlite(old_db) as conn:
        before = conn.execute("SELECT * FROM best_configs").fetchall()
    result = cli_runner.invoke(main, ["db", "upgrade", "--db", str(old_db)])
    assert result.exit_code == 0, result.output
    assert f"upgraded from schema version 1 to {SCHEMA_VERSION}" in result.output
    assert VERIFICATION_COLUMNS <= _columns(old_db)
    with _sqlite(old_db) as conn:
        assert conn.execute("SELECT version FROM schema_info").fetchall() == [(SCHEMA_VERSION,)]
        after = conn.execute("SELECT * FROM best_configs").fetchall()
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # the file keeps its journal
    assert [r[: len(before[0])] for r in after] == before and all(set(r[len(before[0]) :]) == {None} for r in after)
    with ConfigStore(str(old_db)) as store:
        assert store.upgraded_from is None  # already upgraded
        [row] = store.best_rows()
        assert store.record_verification(row, passed=True, seed=4, examples=10)
    again = cli_runner.invoke(main, ["db", "upgrade", "--db", str(old_db)])
    assert again.exit_code == 0 and f"already at schema version {SCHEMA_VERSION}" in again.output


def test_an_old_database_merges_into_a_new_one(old_db, tmp_path):
    with ConfigStore(str(tmp_path / "new.sqlite")) as store:
        assert store.merge(str(old_db)) == (1, 1)
        assert store.best_rows()[0].config == STORED


def test_an_old_postgresql_database_is_upgraded_in_place(postgres_url):
    with ConfigStore(postgres_url) as store:
        store.record_best(
            db.BestRow(
                kernel="vector_add",
                source_hash="abc",
                gpu="H100",
                device_name="test",
                dtype="fp32",
                bucket="n=8192",
                config_json=json.dumps(STORED),
                problem_json="{}",
                time_ms=0.5,
                examples_verified=40,
                triton_version="x",
                torch_version="y",
            )
        )
    engine = create_engine(postgres_url)
    with engine.begin() as conn:  # back to version 1: the verification columns did not exist
        for column in sorted(VERIFICATION_COLUMNS):
            conn.exec_driver_sql(f"ALTER TABLE best_configs DROP COLUMN {column}")
        conn.exec_driver_sql("UPDATE schema_info SET version = 1")
    with ConfigStore(postgres_url, readonly=True) as store:
        assert store.best_rows()[0].verified_at is None
    with ConfigStore(postgres_url) as store:
        [row] = store.best_rows()
        assert row.config == STORED and store.record_verification(row, passed=False, seed=1, examples=2)
        assert store.best_rows()[0].flagged
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version FROM schema_info").scalar() == SCHEMA_VERSION
    engine.dispose()


def test_the_shipped_database_is_at_this_schema_version():
    conn = sqlite3.connect(f"file:{db.shipped_path()}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT version FROM schema_info").fetchall() == [(SCHEMA_VERSION,)]
        assert VERIFICATION_COLUMNS <= {r[1] for r in conn.execute("PRAGMA table_info(best_configs)")}
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # self-contained in a read-only install
    finally:
        conn.close()
