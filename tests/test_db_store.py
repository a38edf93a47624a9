"""The config store keeps the fastest verified row per key, on real SQLite files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, update

from autotune.db import (
    SCHEMA_VERSION,
    BestRow,
    ConfigStore,
    SchemaVersionError,
    StoreError,
    TrialRow,
    as_url,
    default_url,
    shipped_path,
)
from autotune.db.models import SchemaInfo


def best(**overrides: Any) -> BestRow:
    values: dict[str, Any] = dict(
        kernel="softmax",
        source_hash="abc123",
        gpu="H100",
        device_name="NVIDIA H100 80GB HBM3",
        dtype="fp16",
        bucket="m=4096,n=1024",
        config_json=json.dumps({"BLOCK_N": 1024, "num_warps": 8}),
        problem_json=json.dumps({"m": 4096, "n": 1000}),
        time_ms=2.0,
        default_time_ms=3.0,
        baseline_time_ms=4.0,
        timing="graph",
        examples_verified=50,
        triton_version="3.1.0",
        torch_version="2.5.1",
    )
    values.update(overrides)
    return BestRow(**values)


def trial(**overrides: Any) -> TrialRow:
    values: dict[str, Any] = dict(
        study="softmax-H100-fp16",
        kernel="softmax",
        source_hash="abc123",
        gpu="H100",
        dtype="fp16",
        bucket="m=4096,n=1024",
        number=0,
        config_json=json.dumps({"BLOCK_N": 1024}),
        outcome="ok",
        time_ms=2.0,
    )
    values.update(overrides)
    return TrialRow(**values)


def unsaved(row: BestRow) -> BestRow:
    return dataclasses.replace(row, id=None)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "autotune.sqlite"


@pytest.fixture
def store(db_path: Path):
    with ConfigStore(str(db_path)) as s:
        yield s


def set_schema_version(path: Path, version: int) -> None:
    engine = create_engine(as_url(str(path)))
    with engine.begin() as conn:
        conn.execute(update(SchemaInfo).values(version=version))
    engine.dispose()


def test_record_best_reads_back_every_field(store: ConfigStore) -> None:
    created = datetime(2025, 3, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    row = best(created_at=created)
    assert store.record_best(row)
    [got] = store.best_rows()
    assert isinstance(got.id, int)
    assert unsaved(got) == row
    assert got.created_at.tzinfo == timezone.utc and got.created_at == created
    assert got.config == {"BLOCK_N": 1024, "num_warps": 8}
    assert got.problem == {"m": 4096, "n": 1000}
    assert got.speedup_vs_default == pytest.approx(1.5)
    assert got.speedup_vs_baseline == pytest.approx(2.0)


def test_row_properties_handle_missing_times_and_bad_json() -> None:
    row = best(default_time_ms=None, baseline_time_ms=None, config_json="{not json")
    assert row.speedup_vs_default is None and row.speedup_vs_baseline is None
    with pytest.raises(ValueError, match="config_json"):
        row.config
    with pytest.raises(ValueError, match="JSON object"):
        best(config_json="[1, 2]").config


@pytest.mark.parametrize(
    "bad",
    [
        {"config_json": "{oops"},
        {"problem_json": "3"},
        {"time_ms": float("nan")},
        {"time_ms": 0.0},
        {"created_at": datetime(2025, 1, 1)},
        {"timing": "stopwatch"},
    ],
)
def test_record_best_rejects_bad_rows(store: ConfigStore, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        store.record_best(best(**bad))
    assert store.best_rows() == []


def test_upsert_keeps_the_faster_row(store: ConfigStore) -> None:
    assert store.record_best(best(time_ms=2.0))
    assert not store.record_best(best(time_ms=3.0, config_json='{"BLOCK_N": 64}'))
    assert not store.record_best(best(time_ms=2.0, config_json='{"BLOCK_N": 64}'))
    [kept] = store.best_rows()
    assert kept.time_ms == 2.0 and kept.config["BLOCK_N"] == 1024

    faster = best(time_ms=1.5, config_json='{"BLOCK_N": 2048}', examples_verified=7, triton_version="3.2.0")
    assert store.record_best(faster)
    [now] = store.best_rows()
    assert now.id == kept.id
    assert unsaved(now) == faster


@pytest.mark.parametrize(
    "change", [{"source_hash": "def456"}, {"gpu": "A100"}, {"dtype": "bf16"}, {"bucket": "m=4096,n=2048"}]
)
def test_each_key_field_makes_a_separate_row(store: ConfigStore, change: dict[str, str]) -> None:
    assert store.record_best(best(time_ms=2.0))
    assert store.record_best(best(time_ms=5.0, **change))
    assert sorted(r.time_ms for r in store.best_rows()) == [2.0, 5.0]


def test_best_rows_filters_and_orders(store: ConfigStore) -> None:
    rows = [
        best(kernel="softmax", gpu="H100", dtype="fp16", bucket="b"),
        best(kernel="softmax", gpu="H100", dtype="fp16", bucket="a"),
        best(kernel="softmax", gpu="A100", dtype="bf16"),
        best(kernel="vector_add", gpu="H100", dtype="fp32", source_hash="old"),
        best(kernel="vector_add", gpu="H100", dtype="fp32", source_hash="new"),
    ]
    for row in reversed(rows):
        store.record_best(row)

    def keys(found: list[BestRow]) -> list[tuple[str, str, str, str, str]]:
        return [(r.kernel, r.gpu, r.dtype, r.bucket, r.source_hash) for r in found]

    everything = keys(store.best_rows())
    assert everything == sorted(everything) and len(everything) == 5
    assert {r.bucket for r in store.best_rows(kernel="softmax", gpu="H100")} == {"a", "b"}
    assert [r.gpu for r in store.best_rows(dtype="bf16")] == ["A100"]
    assert [r.source_hash for r in store.best_rows(kernel="vector_add", source_hash="new")] == ["new"]
    assert store.best_rows(kernel="softmax", dtype="fp32") == []


def test_trials_round_trip_filter_and_order(store: ConfigStore) -> None:
    rows = [
        trial(
            number=1,
            outcome="incorrect",
            reason="max abs error 0.3",
            time_ms=None,
            failing_example_json=json.dumps({"m": 1, "n": 17}),
        ),
        trial(number=0),
        trial(study="other", number=0, gpu="A100", outcome="timeout", reason="took 10 s", time_ms=None),
    ]
    store.record_trials(rows)
    got = store.trials()
    assert [(t.study, t.number) for t in got] == [("other", 0), ("softmax-H100-fp16", 0), ("softmax-H100-fp16", 1)]
    assert [dataclasses.replace(t, id=None) for t in got] == [rows[2], rows[1], rows[0]]
    assert got[2].config == {"BLOCK_N": 1024}
    assert [t.number for t in store.trials(study="softmax-H100-fp16", gpu="H100")] == [0, 1]
    assert [t.study for t in store.trials(gpu="A100")] == ["other"]
    assert store.trials(bucket="nope") == []


def test_record_trials_is_all_or_nothing(store: ConfigStore) -> None:
    with pytest.raises(ValueError, match="outcome"):
        store.record_trials([trial(number=0), trial(number=1, outcome="exploded")])
    assert store.trials() == []


def test_export_by_gpu_writes_only_that_gpu(store: ConfigStore, tmp_path: Path) -> None:
    for gpu in ("H100", "A100"):
        for bucket in ("m=1", "m=2"):
            store.record_best(best(gpu=gpu, bucket=bucket))
    out = tmp_path / "h100.sqlite"
    assert store.export(str(out), gpu="H100") == 2
    with ConfigStore(str(out), readonly=True) as exported:
        assert [unsaved(r) for r in exported.best_rows()] == [unsaved(r) for r in store.best_rows(gpu="H100")]
        assert exported.trials() == []

    before = out.read_bytes()
    with pytest.raises(FileExistsError):
        store.export(str(out))
    assert out.read_bytes() == before


def test_merge_takes_only_faster_rows(store: ConfigStore, tmp_path: Path) -> None:
    store.record_best(best(bucket="a", time_ms=2.0))
    store.record_best(best(bucket="b", time_ms=1.0))
    other_path = tmp_path / "other.sqlite"
    with ConfigStore(str(other_path)) as other:
        other.record_best(best(bucket="a", time_ms=1.5, device_name="NVIDIA H100 PCIe"))
        other.record_best(best(bucket="b", time_ms=3.0))
        other.record_best(best(bucket="c", time_ms=1.0))

    assert store.merge(str(other_path)) == (3, 2)
    got = {r.bucket: r for r in store.best_rows()}
    assert {b: r.time_ms for b, r in got.items()} == {"a": 1.5, "b": 1.0, "c": 1.0}
    assert got["a"].device_name == "NVIDIA H100 PCIe"
    assert store.merge(str(other_path)) == (3, 0)


def test_merge_refuses_another_schema_version(store: ConfigStore, tmp_path: Path) -> None:
    other_path = tmp_path / "other.sqlite"
    with ConfigStore(str(other_path)) as other:
        other.record_best(best())
    set_schema_version(other_path, SCHEMA_VERSION + 1)
    with pytest.raises(SchemaVersionError):
        store.merge(str(other_path))
    assert store.best_rows() == []


def test_readonly_store_never_writes(db_path: Path) -> None:
    with ConfigStore(str(db_path)) as writer:
        writer.record_best(best())
    before = hashlib.sha256(db_path.read_bytes()).hexdigest()
    with ConfigStore(str(db_path), readonly=True) as ro:
        assert len(ro.best_rows()) == 1
        with pytest.raises(StoreError, match="read-only"):
            ro.record_best(best(time_ms=0.5))
        with pytest.raises(StoreError, match="read-only"):
            ro.record_trials([trial()])
        with pytest.raises(StoreError, match="read-only"):
            ro.merge(str(db_path))
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == before
    with ConfigStore(str(db_path), readonly=True) as ro:
        assert ro.best_rows()[0].time_ms == 2.0


def test_readonly_store_opens_in_a_readonly_directory(tmp_path: Path) -> None:
    folder = tmp_path / "installed"
    folder.mkdir()
    path = folder / "shipped.sqlite"
    with ConfigStore(str(path)) as writer:
        writer.record_best(best())
    folder.chmod(0o555)
    try:
        with ConfigStore(str(path), readonly=True) as ro:
            assert [r.kernel for r in ro.best_rows()] == ["softmax"]
    finally:
        folder.chmod(0o755)


def test_readonly_refuses_missing_or_foreign_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(FileNotFoundError, match="missing.sqlite"):
        ConfigStore(str(missing), readonly=True)
    assert not missing.exists()

    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).close()
    with pytest.raises(StoreError, match="not an autotune database"):
        ConfigStore(str(foreign), readonly=True)


@pytest.mark.parametrize("readonly", [False, True])
def test_schema_version_mismatch_is_refused_on_open(db_path: Path, readonly: bool) -> None:
    ConfigStore(str(db_path)).close()
    set_schema_version(db_path, 99)
    with pytest.raises(SchemaVersionError, match=f"version 99.*version {SCHEMA_VERSION}") as info:
        ConfigStore(str(db_path), readonly=readonly)
    assert (info.value.found, info.value.expected) == (99, SCHEMA_VERSION)
    assert isinstance(info.value, RuntimeError)


def test_default_url_honours_autotune_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "mine.sqlite"))
    assert default_url() == f"sqlite:///{tmp_path / 'mine.sqlite'}"
    monkeypatch.setenv("AUTOTUNE_DB", "postgresql://u:p@host/db")
    assert default_url() == "postgresql://u:p@host/db"
    monkeypatch.delenv("AUTOTUNE_DB")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_url() == f"sqlite:///{tmp_path}/.cache/autotune/autotune.sqlite"
    assert not (tmp_path / ".cache").exists()  # naming the database creates nothing; a writer creates it


def test_as_url_and_shipped_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert as_url("rel/x.sqlite") == f"sqlite:///{tmp_path}/rel/x.sqlite"
    assert as_url("sqlite:///relative.db") == "sqlite:///relative.db"
    assert shipped_path().name == "shipped.sqlite"
    assert shipped_path().parent == Path(__file__).parents[1] / "autotune" / "db"


WORKERS, ROWS_EACH = 8, 25


def _contested_ms(worker: int, i: int) -> float:
    return (
        1000.0 - i * WORKERS - worker
    )  # every write faster than the same worker's last; the fastest is the last of worker 7


def _write_rows(url: str, worker: int, start: Any) -> None:
    start.wait()  # every process opens the brand-new database at once
    with ConfigStore(url) as store:
        for i in range(ROWS_EACH):
            if not store.record_best(best(bucket=f"w={worker},i={i}", time_ms=1.0 + i)):
                raise AssertionError(f"worker {worker} row {i} was not stored")
            config = json.dumps({"worker": worker, "i": i})
            store.record_best(best(bucket="contested", time_ms=_contested_ms(worker, i), config_json=config))
            store.record_trials(
                [trial(study=f"w={worker}", number=2 * i), trial(study=f"w={worker}", number=2 * i + 1)]
            )


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_db(request: pytest.FixtureRequest, db_path: Path) -> str:
    """One config database that many processes write: a SQLite file, or a database on a real PostgreSQL server."""
    return str(db_path) if request.param == "sqlite" else request.getfixturevalue("postgres_url")


def test_concurrent_writers_lose_nothing(shared_db: str) -> None:
    # Fresh processes that inherit no database handle; the preload imports torch once, not eight times.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["autotune.db"])
    start = ctx.Barrier(WORKERS)
    procs = [ctx.Process(target=_write_rows, args=(shared_db, w, start)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    with ConfigStore(shared_db, readonly=True) as store:
        rows = store.best_rows()
        trials = store.trials()
    distinct = {r.bucket for r in rows if r.bucket != "contested"}
    assert distinct == {f"w={w},i={i}" for w in range(WORKERS) for i in range(ROWS_EACH)}
    [contested] = [r for r in rows if r.bucket == "contested"]
    fastest = min((_contested_ms(w, i), w, i) for w in range(WORKERS) for i in range(ROWS_EACH))
    assert (contested.time_ms, contested.config) == (fastest[0], {"worker": fastest[1], "i": fastest[2]})
    assert sorted((t.study, t.number) for t in trials) == sorted(
        (f"w={w}", n) for w in range(WORKERS) for n in range(2 * ROWS_EACH)
    )
    if "://" not in shared_db:
        with sqlite3.connect(shared_db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def _flag(store: ConfigStore, row: BestRow, **kw: Any) -> bool:
    return store.record_verification(
        row,
        passed=False,
        seed=1,
        examples=5,
        failure_json=json.dumps({"problem": {"m": 3, "n": 17}, "reason": "NaN"}),
        **kw,
    )


def test_a_verification_is_kept_on_the_row_it_checked_and_leaves_the_evidence_alone(store: ConfigStore) -> None:
    row = best()
    store.record_best(row)
    [stored] = store.best_rows()
    assert stored.verified_at is None and not stored.flagged
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert _flag(store, stored, at=at)
    [got] = store.best_rows()
    assert (got.verified_at, got.verify_seed, got.verify_examples, got.verify_passed) == (at, 1, 5, False)
    assert got.flagged and got.verify_failure == {"problem": {"m": 3, "n": 17}, "reason": "NaN"}
    verification = dict(
        verified_at=None, verify_seed=None, verify_examples=None, verify_passed=None, verify_failure_json=None
    )
    assert unsaved(dataclasses.replace(got, **verification)) == row

    assert store.record_verification(got, passed=True, seed=2, examples=9)  # the latest verification counts
    [again] = store.best_rows()
    assert again.verify_passed and not again.flagged and again.verify_failure is None and again.verify_seed == 2


def test_a_verification_of_a_row_that_changed_meanwhile_is_not_kept(store: ConfigStore) -> None:
    store.record_best(best(time_ms=2.0))
    [read] = store.best_rows()
    store.record_best(best(time_ms=1.0, config_json='{"BLOCK_N": 64}'))  # a faster config took the key
    assert not store.record_verification(read, passed=True, seed=1, examples=3)
    [now] = store.best_rows()
    assert now.config == {"BLOCK_N": 64} and now.verified_at is None


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"passed": True, "failure_json": '{"problem": {}}'}, "failed verification"),
        ({"examples": -1}, "verify_examples"),
        ({"failure_json": "[1]"}, "JSON object"),
        ({"at": datetime(2026, 1, 1)}, "timezone-aware"),
    ],
)
def test_record_verification_rejects_bad_outcomes(store: ConfigStore, bad: dict[str, Any], message: str) -> None:
    store.record_best(best())
    [row] = store.best_rows()
    with pytest.raises(ValueError, match=message):
        store.record_verification(row, **{"passed": False, "seed": 1, "examples": 3, **bad})
    assert store.best_rows()[0].verified_at is None


def test_a_flagged_row_gives_way_to_any_other_config_however_slow_but_not_to_its_own(store: ConfigStore) -> None:
    store.record_best(best(time_ms=2.0))
    _flag(store, store.best_rows()[0])
    assert not store.record_best(best(time_ms=0.5))  # the same wrong config, found again by a search
    assert store.best_rows()[0].flagged
    slower = best(time_ms=9.0, config_json='{"BLOCK_N": 64}')
    assert store.record_best(slower)
    [now] = store.best_rows()
    assert unsaved(now) == slower and not now.flagged


def test_merge_never_takes_a_flagged_row_over_a_working_one(store: ConfigStore, tmp_path: Path) -> None:
    store.record_best(best(bucket="a", time_ms=2.0))
    other_path = tmp_path / "other.sqlite"
    with ConfigStore(str(other_path)) as other:
        for bucket in ("a", "b"):
            other.record_best(best(bucket=bucket, time_ms=1.0, config_json='{"BLOCK_N": 64}'))
            _flag(other, next(r for r in other.best_rows() if r.bucket == bucket))
    assert store.merge(str(other_path)) == (2, 1)
    got = {r.bucket: r for r in store.best_rows()}
    assert (got["a"].time_ms, got["a"].flagged) == (2.0, False)
    assert got["b"].flagged  # a key of its own: kept with its flag, which keeps it from being served


def test_merge_brings_a_later_verification_of_the_same_row_and_never_an_earlier_one(
    store: ConfigStore, tmp_path: Path
) -> None:
    store.record_best(best(bucket="a"))
    store.record_best(best(bucket="b"))
    copy_path = tmp_path / "copy.sqlite"
    store.export(str(copy_path))  # the rows shipped, then verified where the copy went
    with ConfigStore(str(copy_path)) as copy:
        rows = {r.bucket: r for r in copy.best_rows()}
        assert copy.record_verification(rows["a"], passed=True, seed=3, examples=40)
        assert _flag(copy, rows["b"])
    assert store.merge(str(copy_path)) == (2, 2)
    got = {r.bucket: r for r in store.best_rows()}
    assert got["a"].verify_passed and got["a"].verify_examples == 40
    assert got["b"].flagged  # a failure found later reaches the row too

    assert store.record_verification(got["a"], passed=True, seed=4, examples=80)
    assert store.merge(str(copy_path)) == (2, 0)  # the copy's verifications are older now, or the same
    assert {r.bucket: r.verify_examples for r in store.best_rows()} == {"a": 80, "b": 5}


def test_a_new_file_gets_wal_and_an_exported_file_keeps_its_rollback_journal_when_written(
    store: ConfigStore, db_path: Path, tmp_path: Path
) -> None:
    store.record_best(best())
    exported = tmp_path / "exported.sqlite"
    store.export(str(exported))
    with ConfigStore(str(exported)) as writer:
        assert writer.record_verification(writer.best_rows()[0], passed=True, seed=1, examples=3)

    def mode(path: Path) -> str:
        conn = sqlite3.connect(path)
        try:
            return conn.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            conn.close()

    assert (mode(db_path), mode(exported)) == ("wal", "delete")
