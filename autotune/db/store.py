"""The config store: best verified configs and search trials in SQLite (or any SQLAlchemy URL)."""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import sqlite3
import urllib.parse
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import (Connection, Engine, Select, URL, create_engine, delete, event, insert, inspect, make_url,
                        select, update)
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError, ProgrammingError
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
        newer = isinstance(found, int) and found > expected
        super().__init__(
            f"{where} has schema version {found}, this autotune expects version {expected}"
            + (" (it was written by a newer autotune: upgrade autotune to read it)" if newer else "")
        )
        self.found = found
        self.expected = expected


class MergeError(StoreError):
    """Rows of a database to merge cannot be taken as they are: none of the files is merged."""


class UnreadableRowWarning(UserWarning):
    """A stored row cannot be read (a date that does not parse, text where a number belongs): it is skipped
    alone, the other rows are read."""


def masked_url(url: str | URL) -> str:
    """url as it may be printed: any password replaced by ***."""
    try:
        parsed = make_url(url)
        return str(url) if parsed.password is None else parsed.render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", str(url))


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


def _said(exc: DBAPIError) -> str:
    """What the driver said, on one line (drivers add hints on lines of their own)."""
    return " ".join(str(exc.orig).split())


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_time(value: Any, what: str) -> None:
    if value is not None and not (_is_number(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive finite number of milliseconds, got {value!r}")


def _check_aware(value: Any, what: str = "created_at") -> None:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {value!r}")


_TEXT_FIELDS = ("kernel", "source_hash", "gpu", "device_name", "dtype", "bucket", "config_json", "problem_json",
                "triton_version", "torch_version")


def _check_types(row: BestRow) -> None:
    """ValueError unless each field of a stored row has its type: what a reader needs to use the row at all."""
    for name in _TEXT_FIELDS:
        if not isinstance(getattr(row, name), str):
            raise ValueError(f"{name} must be text, got {getattr(row, name)!r}")
    for name in ("time_ms", "default_time_ms", "baseline_time_ms"):
        value = getattr(row, name)
        if not (_is_number(value) or (value is None and name != "time_ms")):
            raise ValueError(f"{name} must be a number, got {value!r}")
    for name in ("examples_verified", "verify_seed", "verify_examples"):
        value = getattr(row, name)
        if not (_is_int(value) or (value is None and name != "examples_verified")):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    for name in ("timing", "verify_failure_json"):
        if getattr(row, name) is not None and not isinstance(getattr(row, name), str):
            raise ValueError(f"{name} must be text, got {getattr(row, name)!r}")
    _check_aware(row.created_at)
    if row.verified_at is not None:
        _check_aware(row.verified_at, "verified_at")


def _check_best(row: BestRow) -> None:
    _check_types(row)
    _json_object(row.config_json, "config_json")
    _json_object(row.problem_json, "problem_json")
    _check_time(row.time_ms, "time_ms")
    _check_time(row.default_time_ms, "default_time_ms")
    _check_time(row.baseline_time_ms, "baseline_time_ms")
    if row.timing is not None and row.timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS} or None, got {row.timing!r}")
    if row.examples_verified < 0:
        raise ValueError(f"examples_verified must be >= 0, got {row.examples_verified}")
    _check_verification(row.verified_at, row.verify_seed, row.verify_examples, row.verify_passed, row.verify_failure_json)


def _check_verification(
    at: datetime | None, seed: int | None, examples: int | None, passed: bool | None, failure_json: str | None
) -> None:
    given = [v is not None for v in (at, seed, examples, passed)]
    if any(given) and not all(given):
        raise ValueError("verified_at, verify_seed, verify_examples and verify_passed are given together or not at all")
    if at is not None:
        _check_aware(at, "verified_at")
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
    """The user database: $AUTOTUNE_DB (a path or a SQLAlchemy URL), else ~/.cache/autotune/autotune.sqlite.
    Nothing is created here: a writer creates the file, and its directory, when it opens it."""
    env = os.environ.get("AUTOTUNE_DB")
    if env:
        return as_url(env)
    return as_url(str(Path.home() / ".cache" / "autotune" / "autotune.sqlite"))


def as_url(path_or_url: str) -> str:
    """A SQLAlchemy URL as is; a file path as the sqlite:/// URL of its absolute path."""
    if "://" in path_or_url:
        return path_or_url
    path = os.path.abspath(os.path.expanduser(path_or_url))
    # Rendering through URL escapes '%', '?' and '#' in the path so that make_url() gives it back.
    return URL.create("sqlite", database=path).render_as_string(hide_password=False)


def sqlite_path(url: str | URL) -> str | None:
    """The absolute path of a plain SQLite file URL, None for anything else (memory, uri=true, servers)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:") or "uri" in parsed.query:
        return None
    return os.path.abspath(parsed.database)


def in_memory(url: str | URL) -> bool:
    """Whether url names a SQLite database held in memory: it is gone when its process ends."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return False
    database = parsed.database or ""
    return parsed.get_backend_name() == "sqlite" and (
        database in ("", ":memory:") or database.startswith("file::memory:") or "mode=memory" in database
        or parsed.query.get("mode") == "memory"
    )


def _where(url: str) -> str:
    """How messages name a database: a SQLite file by its path, anything else by its URL without the password."""
    return sqlite_path(url) or masked_url(url)


def _readonly_sqlite_url(url: URL, path: str, *, immutable: bool) -> URL:
    query = {"mode": "ro", "uri": "true", **({"immutable": "1"} if immutable else {})}
    return url.set(database="file:" + urllib.parse.quote(path), query=query)


# What SQLite says when a read-only connection cannot create or lock the -shm file a WAL database needs.
_NO_WAL_INDEX = ("SQLITE_READONLY_DIRECTORY", "SQLITE_CANTOPEN", "SQLITE_READONLY_CANTINIT", "SQLITE_READONLY_CANTLOCK")


def _wal_index_unavailable(exc: OperationalError) -> bool:
    name = getattr(exc.orig, "sqlite_errorname", None)  # Python 3.11+
    if name is not None:
        return name in _NO_WAL_INDEX
    return "readonly" in str(exc.orig) or "unable to open" in str(exc.orig)


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
    """An engine on url. Read-only, a SQLite file must exist and is opened in SQLite's read-only mode, so
    nothing is created or changed; a writer's file is created, with its directory, if it does not exist."""
    parsed = make_url(url)
    path = sqlite_path(parsed)
    if path is None:
        return create_engine(parsed)
    if not readonly:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return _sqlite_engine(parsed, readonly=False, wal=wal)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no autotune database at {path}")
    engine = _sqlite_engine(_readonly_sqlite_url(parsed, path, immutable=False), readonly=True, wal=wal)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
    except OperationalError as exc:
        engine.dispose()
        if not _wal_index_unavailable(exc):
            raise
        # A WAL database is read through its -shm file, which cannot be created here (a read-only
        # directory): SQLite then reads the file only as immutable. No writer can be changing it, since a
        # writer would need that file too.
        engine = _sqlite_engine(_readonly_sqlite_url(parsed, path, immutable=True), readonly=True, wal=wal)
    return engine


def _check_autotune(conn: Connection, where: str, *, writing: bool) -> int | None:
    """The schema version of an autotune database this autotune can read (and upgrade); None for a database
    with no tables at all, which only a writer takes (it makes it an autotune database). StoreError for
    anything else: a foreign database, a damaged one, one of an unknown (newer) schema."""
    tables = set(inspect(conn).get_table_names())
    if not tables:
        if writing:
            return None
        raise StoreError(f"{where} is empty: not an autotune database")
    if SchemaInfo.__tablename__ not in tables:
        shown = ", ".join(sorted(tables)[:8]) + (", ..." if len(tables) > 8 else "")
        raise StoreError(f"{where} is not an autotune database: it has no schema_info table (its tables: {shown})")
    versions = set(conn.scalars(select(SchemaInfo.version)))
    if len(versions) != 1:
        found = "no schema version" if not versions else f"several schema versions {sorted(versions, key=str)}"
        raise StoreError(f"{where} is damaged: {found}")
    found = versions.pop()
    if found != SCHEMA_VERSION and found not in migrations.UPGRADABLE:
        raise SchemaVersionError(where, found)
    needed = [BestConfig.__table__, *((TrialRecord.__table__,) if writing else ())]
    for table in needed:
        if table.name not in tables:
            raise StoreError(f"{where} is damaged: it has no {table.name} table")
        # An older schema lacks the nullable columns added since; any other missing column is damage.
        missing = migrations.missing_columns(conn, table)
        lost = [c for c in missing if found == SCHEMA_VERSION or not table.c[c].nullable]
        if lost:
            raise StoreError(f"{where} is damaged: its {table.name} table has no column(s) {', '.join(lost)}")
    return found


def _prepare(engine: Engine, where: str, *, readonly: bool) -> tuple[int, int | None]:
    """(schema version it is read at, version found) once the database is known to be an autotune database:
    a reader takes it as it is; a writer first makes a database with no tables a fresh one or upgrades an
    older one, and makes sure it can write at all. StoreError for anything else, before any change."""
    if readonly:
        with engine.connect() as conn:
            found = _check_autotune(conn, where, writing=False)
        return found, found
    for attempt in range(_WRITE_RETRIES):
        changing = False  # creating or upgrading the tables, which another process may be doing at the same time
        try:
            with engine.execution_options(**{_IMMEDIATE: True}).connect() as conn, conn.begin() as tx:
                found = _check_autotune(conn, where, writing=True)
                changing = found != SCHEMA_VERSION
                if found is None:
                    Base.metadata.create_all(conn)
                    conn.execute(insert(SchemaInfo).values(version=SCHEMA_VERSION))
                elif found != SCHEMA_VERSION:
                    migrations.upgrade(conn, found)
                else:
                    # Nothing to change: write the version row over itself and roll back, so that a database
                    # this process cannot write (a read-only file, directory or role) is refused now, before
                    # a search has run, not at its first result.
                    conn.execute(update(SchemaInfo).values(version=SchemaInfo.version))
                    tx.rollback()
            return SCHEMA_VERSION, found
        except (IntegrityError, ProgrammingError):
            # Another process created the tables (or upgraded them) at the same moment: a server database
            # cannot lock tables that do not exist yet (SQLite's IMMEDIATE lock can). The retry finds them.
            if not changing or attempt == _WRITE_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _readable_fields(engine: Engine, version: int) -> tuple[str, ...]:
    """The BestRow fields a database of this version has columns for (an older read-only one lacks some)."""
    if version == SCHEMA_VERSION:
        return _BEST_FIELDS
    with engine.connect() as conn:
        missing = set(migrations.missing_columns(conn, BestConfig.__table__))
    return tuple(f for f in _BEST_FIELDS if BestConfig.__mapper__.attrs[f].columns[0].name not in missing)


def _unreadable_column(s: Session, query: Select, row_id: int) -> str | None:
    """The first column of query whose value in row row_id cannot be read (a date that does not parse)."""
    for column in query.selected_columns:
        try:
            s.execute(query.with_only_columns(column).where(BestConfig.id == row_id)).scalar()
        except (ValueError, TypeError):
            return column.name
    return None


def _decoded(values: dict[str, Any]) -> BestRow:
    row = BestRow(**values)
    _check_types(row)
    return row


class ConfigStore:
    """Best verified configs and search trials in one database.

    Opening checks that the database is an autotune database of a schema this autotune reads (StoreError,
    SchemaVersionError otherwise, before anything is changed).

    Args:
        url: a SQLAlchemy URL or a file path; None for `default_url()`.
        readonly: never create or write: a SQLite file is opened in SQLite's read-only mode and must exist
            (FileNotFoundError); a database of an older schema is read as it is. Otherwise the database is
            created if it has no tables, upgraded in place if it is older, and refused if it cannot be written.
    """

    def __init__(self, url: str | None = None, *, readonly: bool = False) -> None:
        self.url = as_url(url) if url is not None else default_url()
        self.readonly = readonly
        self.where = _where(self.url)
        """How messages name this database: a SQLite file's path, else the URL without its password."""
        self.upgraded_from: int | None = None
        """The older schema version this (writable) store was upgraded from when it was opened, if it was."""
        try:
            self._engine = _open_engine(self.url, readonly=readonly)
        except (ArgumentError, ValueError) as exc:  # NoSuchModuleError is an ArgumentError
            raise StoreError(f"{self.where} is not a database URL autotune can open: {exc}") from None
        except ImportError as exc:
            raise StoreError(f"{self.where}: its database driver is not installed ({exc}); for PostgreSQL, "
                             "pip install 'autotune[postgres]'") from None
        except DBAPIError as exc:
            raise StoreError(f"cannot open {self.where}: {_said(exc)}") from None
        self._writer = self._engine.execution_options(**{_IMMEDIATE: True})
        try:
            version, found = _prepare(self._engine, self.where, readonly=readonly)
            self._fields = _readable_fields(self._engine, version)
        except DBAPIError as exc:
            self._engine.dispose()
            mode = "reading" if readonly else "writing"
            raise StoreError(f"cannot open {self.where} for {mode}: {_said(exc)}") from None
        except BaseException:
            self._engine.dispose()
            raise
        if not readonly and found is not None and found != SCHEMA_VERSION:
            self.upgraded_from = found

    @property
    def in_memory(self) -> bool:
        """Held in memory (sqlite:///:memory:): whatever is written is gone when this process ends."""
        return in_memory(self.url)

    def __enter__(self) -> ConfigStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = ", readonly=True" if self.readonly else ""
        return f"ConfigStore({masked_url(self.url)!r}{mode})"

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
        """Best rows matching every given filter, ordered by kernel, gpu, dtype, bucket. A row that cannot be
        read (a date that does not parse, text where a number belongs) is left out with an UnreadableRowWarning."""
        query = self._best_query(kernel=kernel, gpu=gpu, dtype=dtype, source_hash=source_hash, bucket=bucket)
        rows, unreadable = self._read_best(query)
        for why in unreadable:
            warnings.warn(f"autotune: {self.where}: skipped {why}", UnreadableRowWarning, stacklevel=2)
        return rows

    def _best_query(self, **filters: str | None) -> Select:
        return (
            select(*(getattr(BestConfig, f) for f in self._fields))
            .filter_by(**{k: v for k, v in filters.items() if v is not None})
            .order_by(BestConfig.kernel, BestConfig.gpu, BestConfig.dtype, BestConfig.bucket, BestConfig.source_hash)
        )

    def _read_best(self, query: Select) -> tuple[list[BestRow], list[str]]:
        """The rows query selects, and why each row that cannot be read was left out."""
        try:
            with Session(self._engine) as s:
                result = s.execute(query)
                try:
                    return [_decoded(r._asdict()) for r in result], []
                except (ValueError, TypeError):
                    result.close()  # some row does not decode: read them one at a time, so that it hides no other
                rows, unreadable = [], []
                keys = query.with_only_columns(BestConfig.id, BestConfig.kernel, BestConfig.dtype, BestConfig.bucket)
                for key in s.execute(keys).all():
                    try:
                        rows.append(_decoded(s.execute(query.where(BestConfig.id == key.id)).one()._asdict()))
                    except (ValueError, TypeError) as exc:
                        column = _unreadable_column(s, query, key.id)
                        unreadable.append(f"row {key.id} ({key.kernel} {key.dtype} {key.bucket}): "
                                          + (f"{column}: " if column and column not in str(exc) else "") + str(exc))
                return rows, unreadable
        except DBAPIError as exc:
            raise StoreError(f"cannot read {self.where}: {_said(exc)}") from None

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
        try:
            with Session(self._engine) as s:
                return [_trial_row(m) for m in s.scalars(query)]
        except DBAPIError as exc:
            raise StoreError(f"cannot read {self.where}: {_said(exc)}") from None

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
        """Take each best row of another store that is faster than ours; returns (rows read, rows taken).
        Rows are checked for form only (`autotune.merge` also checks them against their kernels); a file
        with any bad row is refused whole."""
        return self.merge_rows(rows_to_merge([path_or_url]))[0]

    def merge_rows(self, batches: Sequence[tuple[str, Sequence[BestRow]]]) -> list[tuple[int, int]]:
        """Take each row of each batch (from `rows_to_merge`) that is faster than ours, all in one transaction;
        returns (rows read, rows taken) per batch."""
        for _, rows in batches:
            for row in rows:
                _check_best(row)
        return self._write(lambda s: [(len(rows), sum(_upsert(s, row) for row in rows)) for _, rows in batches])


def rows_to_merge(
    sources: Iterable[str | os.PathLike[str]], check: Callable[[BestRow], str | None] | None = None
) -> list[tuple[str, list[BestRow]]]:
    """(source, its best rows) for each source database, read-only, every row checked for form and by `check`
    (why a row cannot be taken, or None). MergeError naming the bad rows if any row of any source is bad;
    StoreError if a source is not an autotune database this autotune reads. Writes nothing anywhere."""
    batches: list[tuple[str, list[BestRow]]] = []
    problems: list[str] = []
    for source in sources:
        name = os.fspath(source)
        with ConfigStore(as_url(name), readonly=True) as store:
            rows, unreadable = store._read_best(store._best_query())
        problems += [f"{name}: {why}" for why in unreadable]
        for row in rows:
            try:
                _check_best(row)
                why = check(row) if check is not None else None
            except ValueError as exc:
                why = str(exc)
            if why:
                problems.append(f"{name}: row {row.id} ({row.kernel} {row.dtype} {row.bucket}): {why}")
        batches.append((name, rows))
    if problems:
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise MergeError(f"{len(problems)} row(s) cannot be merged, so nothing was: " + "; ".join(problems[:5]) + more)
    return batches
