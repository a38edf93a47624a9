"""The config store: best verified configs and search trials in SQLite (or any SQLAlchemy URL)."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, URL, create_engine, delete, event, inspect, make_url, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError, ProgrammingError
from sqlalchemy.orm import Session

from autotune.db import migrations
from autotune.db.models import SCHEMA_VERSION, Base, BestConfig, SchemaInfo, TrialRecord
from autotune.identity import OUTCOMES

TIMINGS = ("graph", "do_bench", "wall")
"""How a row's time_ms was taken (`bench.kernel_time`): do_bench of the call's CUDA-graph replay, the GPU's time
alone; do_bench of the call itself, host time included wherever it outlasts the L2 clear (a call that cannot be
captured, and every search before the graph timing); wall clock under the interpreter. None: not recorded."""

_BUSY_TIMEOUT_MS = 30_000
_WRITE_RETRIES = 5
_IMMEDIATE = "autotune_begin_immediate"  # execution option read by the SQLite begin hook

T = TypeVar("T")


class StoreError(RuntimeError):
    """A database cannot be opened or written as asked."""


class SchemaVersionError(StoreError):
    """A database was written with another schema version than this autotune expects."""

    def __init__(self, where: str, found: int, expected: int = SCHEMA_VERSION) -> None:
        super().__init__(f"{where} has schema version {found}, this autotune expects version {expected}")
        self.found = found
        self.expected = expected


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None


def _json_object(text: str, what: str) -> dict[str, Any]:
    value = _json(text, what)
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


@dataclass(frozen=True, kw_only=True)
class BestRow:
    """The fastest verified config for one (kernel, source_hash, gpu, dtype, bucket), with its evidence."""

    kernel: str
    source_hash: str
    gpu: str
    device_name: str
    dtype: str
    bucket: str
    config_json: str
    problem_json: str
    time_ms: float
    default_time_ms: float | None = None
    baseline_time_ms: float | None = None
    timing: str | None = None  # how time_ms was taken: one of TIMINGS, None where not recorded
    examples_verified: int
    triton_version: str
    torch_version: str
    created_at: datetime = field(default_factory=_now)
    verified_at: datetime | None = None
    verify_seed: int | None = None
    verify_examples: int | None = None
    verify_passed: bool | None = None
    verify_failure_json: str | None = None
    id: int | None = None

    @property
    def config(self) -> dict[str, Any]:
        """The config as a dict; ValueError if the stored JSON is not an object."""
        return _json_object(self.config_json, "config_json")

    @property
    def flagged(self) -> bool:
        """Failed its latest re-verification: the runtime no longer serves it."""
        return self.verify_passed is False

    @property
    def verify_failure(self) -> dict[str, Any] | None:
        """Why the latest re-verification failed (the minimal failing problem and the reason), if it did."""
        return None if self.verify_failure_json is None else _json_object(self.verify_failure_json, "verify_failure_json")

    @property
    def recorded_failure(self) -> tuple[dict[str, Any], int] | None:
        """(problem, seed of its inputs) on which the latest re-verification failed, if it failed on one:
        a later check of this bucket runs it again (see verify's known_failures)."""
        failure = self.verify_failure if self.flagged else None
        # A failure recorded without its seed (before failures kept one) failed on the run's own seed.
        seed = failure.get("seed", self.verify_seed) if failure else None
        if not failure or not isinstance(failure.get("problem"), dict) or not isinstance(seed, int):
            return None
        return failure["problem"], seed

    @property
    def problem(self) -> dict[str, Any]:
        """The timed problem as a dict; ValueError if the stored JSON is not an object."""
        return _json_object(self.problem_json, "problem_json")

    @property
    def speedup_vs_default(self) -> float | None:
        """How many times faster than the space's default config, if that was timed."""
        return None if self.default_time_ms is None else self.default_time_ms / self.time_ms

    @property
    def speedup_vs_baseline(self) -> float | None:
        """How many times faster than the PyTorch baseline, if that was timed."""
        return None if self.baseline_time_ms is None else self.baseline_time_ms / self.time_ms


@dataclass(frozen=True, kw_only=True)
class TrialRow:
    """One trial of a search study: the config tried, its outcome and, when it ran, its time."""

    study: str
    kernel: str
    source_hash: str
    gpu: str
    dtype: str
    bucket: str
    number: int
    config_json: str
    outcome: str
    reason: str | None = None
    time_ms: float | None = None
    failing_example_json: str | None = None
    created_at: datetime = field(default_factory=_now)
    id: int | None = None

    @property
    def config(self) -> dict[str, Any]:
        """The config as a dict; ValueError if the stored JSON is not an object."""
        return _json_object(self.config_json, "config_json")


def _check_time(value: float | None, what: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive finite number of milliseconds, got {value!r}")


def _check_aware(value: datetime) -> None:
    if value.tzinfo is None:
        raise ValueError(f"created_at must be timezone-aware, got {value!r}")


def _check_best(row: BestRow) -> None:
    _json_object(row.config_json, "config_json")
    _json_object(row.problem_json, "problem_json")
    _check_time(row.time_ms, "time_ms")
    _check_time(row.default_time_ms, "default_time_ms")
    _check_time(row.baseline_time_ms, "baseline_time_ms")
    if row.timing is not None and row.timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS} or None, got {row.timing!r}")
    if row.examples_verified < 0:
        raise ValueError(f"examples_verified must be >= 0, got {row.examples_verified}")
    _check_aware(row.created_at)
    _check_verification(row.verified_at, row.verify_seed, row.verify_examples, row.verify_passed, row.verify_failure_json)


def _check_verification(
    at: datetime | None, seed: int | None, examples: int | None, passed: bool | None, failure_json: str | None
) -> None:
    given = [v is not None for v in (at, seed, examples, passed)]
    if any(given) and not all(given):
        raise ValueError("verified_at, verify_seed, verify_examples and verify_passed are given together or not at all")
    if at is not None:
        _check_aware(at)
    if examples is not None and examples < 0:
        raise ValueError(f"verify_examples must be >= 0, got {examples}")
    if failure_json is not None:
        if passed is not False:
            raise ValueError("verify_failure_json belongs to a failed verification (verify_passed=False)")
        _json_object(failure_json, "verify_failure_json")


def _check_trial(row: TrialRow) -> None:
    if row.outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {row.outcome!r}")
    _json_object(row.config_json, "config_json")
    if row.failing_example_json is not None:
        _json(row.failing_example_json, "failing_example_json")
    _check_time(row.time_ms, "time_ms")
    _check_aware(row.created_at)


def _values(row: BestRow | TrialRow) -> dict[str, Any]:
    # Model attributes carry the dataclass field names, so rows map across by name.
    return {f.name: getattr(row, f.name) for f in fields(row) if f.name != "id"}


_BEST_FIELDS = tuple(f.name for f in fields(BestRow))
_KEY = ("kernel", "source_hash", "gpu", "dtype", "bucket")


def _trial_row(m: TrialRecord) -> TrialRow:
    return TrialRow(**{f.name: getattr(m, f.name) for f in fields(TrialRow)})


def _replaces(new: BestRow, old: BestConfig) -> bool:
    """Whether new takes old's place: a row that failed re-verification loses to one that did not, and
    its config stays out of its key (a search would find it again); otherwise the faster row wins."""
    if old.verify_passed is False:
        return not new.flagged and new.config != _json_object(old.config_json, "stored config_json")
    return not new.flagged and new.time_ms < old.time_ms


def _upsert(s: Session, row: BestRow) -> bool:
    # FOR UPDATE locks an existing row on server databases; SQLite holds the write lock already.
    old = s.scalars(select(BestConfig).filter_by(**{k: getattr(row, k) for k in _KEY}).with_for_update()).one_or_none()
    if old is None:
        s.add(BestConfig(**_values(row)))
        return True
    if not _replaces(row, old):
        return False
    for name, value in _values(row).items():
        setattr(old, name, value)
    return True


def default_url() -> str:
    """The user database: $AUTOTUNE_DB (a path or a SQLAlchemy URL), else ~/.cache/autotune/autotune.sqlite."""
    env = os.environ.get("AUTOTUNE_DB")
    if env:
        return as_url(env)
    path = Path.home() / ".cache" / "autotune" / "autotune.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    return as_url(str(path))


def as_url(path_or_url: str) -> str:
    """A SQLAlchemy URL as is; a file path as the sqlite:/// URL of its absolute path."""
    if "://" in path_or_url:
        return path_or_url
    path = os.path.abspath(os.path.expanduser(path_or_url))
    # Rendering through URL escapes '%', '?' and '#' in the path so that make_url() gives it back.
    return URL.create("sqlite", database=path).render_as_string(hide_password=False)


def _sqlite_file(url: URL) -> str | None:
    """The absolute path of a plain SQLite file URL, None for anything else (memory, uri=true, servers)."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:") or "uri" in url.query:
        return None
    return os.path.abspath(url.database)


def _readonly_sqlite_url(url: URL, path: str) -> URL:
    query = {"mode": "ro", "uri": "true"}
    # A WAL database needs its -shm file; where it cannot be created, SQLite only reads the file
    # as immutable. No writer can be changing it there, since a writer would need that file too.
    if not os.access(os.path.dirname(path), os.W_OK):
        query["immutable"] = "1"
    return url.set(database="file:" + urllib.parse.quote(path), query=query)


def _sqlite_engine(url: URL, *, readonly: bool, wal: bool) -> Engine:
    engine = create_engine(url)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # sqlite3 would otherwise issue BEGIN on its own terms; _on_begin takes that over.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        # WAL for a new file only: an existing one keeps its mode, so that writing to an exported or
        # shipped file (rollback journal: self-contained, readable from a read-only install) keeps it so.
        if wal and not readonly and cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
            try:
                cursor.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:
                # Another process holds the lock while it creates the file; WAL is a property of the
                # file, set by whichever connection gets there first, and rollback mode is correct too.
                pass
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock before the upsert reads, so concurrent writers queue on
        # the busy timeout instead of deciding on a stale read; readers stay deferred.
        immediate = conn.get_execution_options().get(_IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate and not readonly else "BEGIN")

    return engine


def _open_engine(url: str | URL, *, readonly: bool, wal: bool = True) -> Engine:
    parsed = make_url(url)
    path = _sqlite_file(parsed)
    if path is None:
        return create_engine(parsed)
    if readonly:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no autotune database at {path}")
        parsed = _readonly_sqlite_url(parsed, path)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    return _sqlite_engine(parsed, readonly=readonly, wal=wal)


def _stored_version(s: Session, where: str) -> int | None:
    """The database's schema version: None for a fresh one; SchemaVersionError unless it is this
    autotune's or one it can upgrade."""
    if not inspect(s.connection()).has_table(SchemaInfo.__tablename__):
        return None
    versions = set(s.scalars(select(SchemaInfo.version)))
    if len(versions) > 1:
        raise StoreError(f"{where} has several schema versions {sorted(versions)}")
    found = versions.pop() if versions else None
    if found is not None and found != SCHEMA_VERSION and found not in migrations.UPGRADABLE:
        raise SchemaVersionError(where, found)
    return found


def _prepare(engine: Engine, where: str, *, readonly: bool) -> int:
    """Check the schema version and return it; a writable database is first brought to this
    autotune's version: created, or upgraded from an older one."""
    if readonly:
        with Session(engine) as s:
            found = _stored_version(s, where)
            if found is None:
                raise StoreError(f"{where} is not an autotune database (no schema version)")
        return found
    for attempt in range(_WRITE_RETRIES):
        try:
            with Session(engine.execution_options(**{_IMMEDIATE: True})) as s, s.begin():
                found = _stored_version(s, where)
                Base.metadata.create_all(s.connection())
                if found is None:
                    s.add(SchemaInfo(version=SCHEMA_VERSION))
                elif found != SCHEMA_VERSION:
                    migrations.upgrade(s.connection(), found)
            return SCHEMA_VERSION
        except (IntegrityError, ProgrammingError):
            # Another process created the tables (or upgraded them) at the same moment: a server database
            # cannot lock tables that do not exist yet (SQLite's IMMEDIATE lock can). The retry finds them.
            if attempt == _WRITE_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _readable_fields(engine: Engine, version: int) -> tuple[str, ...]:
    """The BestRow fields a database of this version has columns for (an older read-only one lacks some)."""
    if version == SCHEMA_VERSION:
        return _BEST_FIELDS
    with engine.connect() as conn:
        missing = set(migrations.missing_columns(conn, BestConfig.__table__))
    return tuple(f for f in _BEST_FIELDS if BestConfig.__mapper__.attrs[f].columns[0].name not in missing)


class ConfigStore:
    """Best verified configs and search trials in one database.

    Args:
        url: a SQLAlchemy URL or a file path; None for `default_url()`.
        readonly: never create or write; a SQLite file is opened in SQLite's read-only mode and must
            exist (FileNotFoundError) and hold autotune tables (StoreError).
    """

    def __init__(self, url: str | None = None, *, readonly: bool = False) -> None:
        self.url = as_url(url) if url is not None else default_url()
        self.readonly = readonly
        where = make_url(self.url).render_as_string(hide_password=True)
        self._engine = _open_engine(self.url, readonly=readonly)
        self._writer = self._engine.execution_options(**{_IMMEDIATE: True})
        try:
            self._fields = _readable_fields(self._engine, _prepare(self._engine, where, readonly=readonly))
        except DBAPIError as exc:
            self._engine.dispose()
            raise StoreError(f"cannot open {where}: {exc.orig}") from exc
        except BaseException:
            self._engine.dispose()
            raise

    def __enter__(self) -> ConfigStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = ", readonly=True" if self.readonly else ""
        return f"ConfigStore({make_url(self.url).render_as_string(hide_password=True)!r}{mode})"

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    def _write(self, work: Callable[[Session], T]) -> T:
        if self.readonly:
            raise StoreError(f"{self!r} is read-only")
        for attempt in range(_WRITE_RETRIES):
            try:
                with Session(self._writer) as s, s.begin():
                    return work(s)
            except IntegrityError:
                # A concurrent writer inserted the same key after our read (server databases
                # cannot lock a row that does not exist yet); the retry sees its row.
                if attempt == _WRITE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def record_best(self, row: BestRow) -> bool:
        """Store row unless a row with the same key is as fast or faster; True if it was stored."""
        _check_best(row)
        return self._write(lambda s: _upsert(s, row))

    def best_rows(
        self,
        kernel: str | None = None,
        gpu: str | None = None,
        dtype: str | None = None,
        source_hash: str | None = None,
        bucket: str | None = None,
    ) -> list[BestRow]:
        """Best rows matching every given filter, ordered by kernel, gpu, dtype, bucket."""
        wanted = {"kernel": kernel, "gpu": gpu, "dtype": dtype, "source_hash": source_hash, "bucket": bucket}
        query = (
            select(*(getattr(BestConfig, f) for f in self._fields))
            .filter_by(**{k: v for k, v in wanted.items() if v is not None})
            .order_by(BestConfig.kernel, BestConfig.gpu, BestConfig.dtype, BestConfig.bucket, BestConfig.source_hash)
        )
        with Session(self._engine) as s:
            return [BestRow(**r._asdict()) for r in s.execute(query)]

    def record_verification(
        self,
        row: BestRow,
        *,
        passed: bool,
        seed: int,
        examples: int,
        failure_json: str | None = None,
        at: datetime | None = None,
    ) -> bool:
        """Keep the outcome of re-verifying row's config on the stored row, if it still holds that config;
        True if it did. A failed row is flagged: the runtime no longer serves it."""
        at = at or _now()
        _check_verification(at, seed, examples, passed, failure_json)
        stored = update(BestConfig).filter_by(**{k: getattr(row, k) for k in _KEY}, config_json=row.config_json)
        values = dict(verified_at=at, verify_seed=seed, verify_examples=examples, verify_passed=passed,
                      verify_failure_json=failure_json)
        return self._write(lambda s: s.execute(stored.values(**values)).rowcount == 1)

    def record_trials(self, rows: Sequence[TrialRow]) -> None:
        """Append trials, all or none."""
        for row in rows:
            _check_trial(row)
        self._write(lambda s: s.add_all(TrialRecord(**_values(row)) for row in rows))

    def trials(
        self,
        kernel: str | None = None,
        gpu: str | None = None,
        dtype: str | None = None,
        bucket: str | None = None,
        study: str | None = None,
    ) -> list[TrialRow]:
        """Trials matching every given filter, ordered by study, number."""
        wanted = {"kernel": kernel, "gpu": gpu, "dtype": dtype, "bucket": bucket, "study": study}
        query = (
            select(TrialRecord)
            .filter_by(**{k: v for k, v in wanted.items() if v is not None})
            .order_by(TrialRecord.study, TrialRecord.number, TrialRecord.id)
        )
        with Session(self._engine) as s:
            return [_trial_row(m) for m in s.scalars(query)]

    def export(
        self,
        path: str | os.PathLike[str],
        *,
        gpu: str | None = None,
        kernel: str | None = None,
        keep: Callable[[BestRow], bool] | None = None,
    ) -> int:
        """Write the selected best rows (those `keep` accepts, if given) to a new SQLite file at path; returns how many."""
        rows = [row for row in self.best_rows(kernel=kernel, gpu=gpu) if keep is None or keep(row)]
        target = os.path.abspath(path)
        open(target, "x").close()  # claims the path atomically; FileExistsError if taken
        # Rollback-journal mode keeps the file self-contained, readable from a read-only install.
        engine = _open_engine(URL.create("sqlite", database=target), readonly=False, wal=False)
        try:
            _prepare(engine, target, readonly=False)
            with Session(engine) as s, s.begin():
                s.add_all(BestConfig(**_values(row)) for row in rows)
        except BaseException:
            engine.dispose()
            os.unlink(target)
            raise
        engine.dispose()
        return len(rows)

    def prune(self, drop: Callable[[BestRow], bool], *, gpu: str | None = None, kernel: str | None = None) -> int:
        """Delete the best rows (of `gpu` and `kernel`, if given) that `drop` accepts, in one transaction;
        returns how many."""
        rows = [row for row in self.best_rows(kernel=kernel, gpu=gpu) if drop(row)]

        def work(s: Session) -> int:
            for row in rows:
                s.execute(delete(BestConfig).filter_by(**{k: getattr(row, k) for k in _KEY}))
            return len(rows)

        return self._write(work)

    def merge(self, path_or_url: str | os.PathLike[str]) -> tuple[int, int]:
        """Take each best row of another store that is faster than ours; returns (rows read, rows taken)."""
        with ConfigStore(as_url(os.fspath(path_or_url)), readonly=True) as source:
            rows = source.best_rows()
        for row in rows:
            _check_best(row)
        taken = self._write(lambda s: sum(_upsert(s, row) for row in rows))
        return len(rows), taken
