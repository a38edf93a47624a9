"""Database files of every kind a user may point autotune at: autotune databases (as a search writes them, as
`db export` writes them, of an older schema) and files that are no autotune database this autotune reads."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from pathlib import Path

import autotune.kernels.vector_add.add as vector_add
from autotune import gpu
from autotune.db import BestRow, ConfigStore

STORED = {"BLOCK_SIZE": 256, "num_warps": 2, "num_stages": 3}
"""The config of the vector_add row in each autotune database made here (not the default config)."""
BUCKET = "n=8192"
PROBLEM = {"shape": [5000], "layout": "contiguous", "magnitude": 1.0}
_ADDED_SINCE_V1 = ("verified_at", "verify_seed", "verify_examples", "verify_passed", "verify_failure", "timing")


@contextlib.contextmanager
def sqlite(path):
    """A plain sqlite3 connection, committed and closed on leaving."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


def row(**overrides) -> BestRow:
    """A vector_add row for this machine's GPU in fp32, tuned for its current source."""
    values = dict(
        kernel="vector_add",
        source_hash=vector_add.SPEC.source_hash,
        gpu=gpu.current_gpu().name,
        device_name="test",
        dtype="fp32",
        bucket=BUCKET,
        config_json=json.dumps(STORED),
        problem_json=json.dumps(PROBLEM),
        time_ms=1.0,
        examples_verified=20,
        triton_version="x",
        torch_version="y",
    )
    return BestRow(**{**values, **overrides})


def valid(path: Path, *rows: BestRow) -> Path:
    """An autotune database as a search leaves it (WAL), holding `rows` (default: one vector_add row)."""
    with ConfigStore(str(path)) as store:
        for r in rows or (row(),):
            store.record_best(r)
    return path


def exported(path: Path) -> Path:
    """An autotune database in rollback-journal mode, as `db export` writes it and the package ships it."""
    valid(path)
    with sqlite(path) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
    return path


def old_schema(path: Path) -> Path:
    """A database of schema version 1 (before the verification and timing columns), rollback journal."""
    exported(path)
    with sqlite(path) as conn:
        for column in _ADDED_SINCE_V1:
            conn.execute(f"ALTER TABLE best_configs DROP COLUMN {column}")
        conn.execute("UPDATE schema_info SET version = 1")
    return path


def newer(path: Path) -> Path:
    """An autotune database of a schema version this autotune does not know (a newer autotune's)."""
    exported(path)
    with sqlite(path) as conn:
        conn.execute("UPDATE schema_info SET version = 99")
    return path


def foreign(path: Path) -> Path:
    """Another program's SQLite database, with a table of the same name as autotune's."""
    with sqlite(path) as conn:
        conn.executescript(
            "CREATE TABLE best_configs (name TEXT, score REAL); INSERT INTO best_configs VALUES ('a', 1);"
        )
    return path


def empty(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def corrupt(path: Path) -> Path:
    path.write_bytes(b"this is not a SQLite database\n" * 200)
    return path


def truncated(path: Path) -> Path:
    """An autotune database cut to its first page: its tables are named, their pages are gone."""
    exported(path)
    path.write_bytes(path.read_bytes()[:4096])
    return path


def damaged(path: Path) -> Path:
    """An autotune database that lost its best_configs table."""
    exported(path)
    with sqlite(path) as conn:
        conn.execute("DROP TABLE best_configs")
    return path


KINDS = {f.__name__: f for f in (valid, exported, old_schema, newer, foreign, empty, corrupt, truncated, damaged)}
SERVED = ("valid", "exported", "old_schema")
"""The kinds whose rows this autotune reads; every other kind is refused with one clear error."""


def make(kind: str, path: Path) -> Path:
    return KINDS[kind](path)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
