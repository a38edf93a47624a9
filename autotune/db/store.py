"""The config store: best verified configs and search trials in SQLite (or any SQLAlchemy URL)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import URL, Select, delete, select, update
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from autotune.db.connect import (
    IMMEDIATE,
    WRITE_RETRIES,
    as_url,
    default_url,
    in_memory,
    masked_url,
    open_engine,
    prepare,
    readable_fields,
    where_of,
)
from autotune.db.errors import MergeError, StoreError, UnreadableRowWarning
from autotune.db.models import SCHEMA_VERSION, BestConfig, TrialRecord
from autotune.db.rows import (
    BestRow,
    TrialRow,
    check_best,
    check_trial,
    check_types,
    check_verification,
    driver_said,
    json_object,
    now,
    row_values,
)

T = TypeVar("T")

_KEY = ("kernel", "source_hash", "gpu", "dtype", "bucket")


def _trial_row(m: TrialRecord) -> TrialRow:
    return TrialRow(**{f.name: getattr(m, f.name) for f in fields(TrialRow)})


def _replaces(new: BestRow, old: BestConfig) -> bool:
    """Whether new takes old's place: the same measurement (config, time, creation) re-verified later
    brings its latest verification, pass or fail; a row that failed re-verification loses to one that did
    not, and its config stays out of its key (a search would find it again); otherwise the faster row wins."""
    if (new.config_json, new.time_ms, new.created_at) == (old.config_json, old.time_ms, old.created_at):
        return new.verified_at is not None and (old.verified_at is None or new.verified_at > old.verified_at)
    if old.verify_passed is False:
        return not new.flagged and new.config != json_object(old.config_json, "stored config_json")
    return not new.flagged and new.time_ms < old.time_ms


def _upsert(s: Session, row: BestRow) -> bool:
    # FOR UPDATE locks an existing row on server databases; SQLite holds the write lock already.
    old = s.scalars(select(BestConfig).filter_by(**{k: getattr(row, k) for k in _KEY}).with_for_update()).one_or_none()
    if old is None:
        s.add(BestConfig(**row_values(row)))
        return True
    if not _replaces(row, old):
        return False
    for name, value in row_values(row).items():
        setattr(old, name, value)
    return True


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
    check_types(row)
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
        self.where = where_of(self.url)
        """How messages name this database: a SQLite file's path, else the URL without its password."""
        self.upgraded_from: int | None = None
        """The older schema version this (writable) store was upgraded from when it was opened, if it was."""
        try:
            self._engine = open_engine(self.url, readonly=readonly)
        except (ArgumentError, ValueError) as exc:  # NoSuchModuleError is an ArgumentError
            raise StoreError(f"{self.where} is not a database URL autotune can open: {exc}") from None
        except ImportError as exc:
            raise StoreError(
                f"{self.where}: its database driver is not installed ({exc}); for PostgreSQL, "
                "pip install 'autotune[postgres]'"
            ) from None
        except DBAPIError as exc:
            raise StoreError(f"cannot open {self.where}: {driver_said(exc)}") from None
        self._writer = self._engine.execution_options(**{IMMEDIATE: True})
        try:
            version, found = prepare(self._engine, self.where, readonly=readonly)
            self._fields = readable_fields(self._engine, version)
        except DBAPIError as exc:
            self._engine.dispose()
            mode = "reading" if readonly else "writing"
            raise StoreError(f"cannot open {self.where} for {mode}: {driver_said(exc)}") from None
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
        for attempt in range(WRITE_RETRIES):
            try:
                with Session(self._writer) as s, s.begin():
                    return work(s)
            except IntegrityError:
                # A concurrent writer inserted the same key after our read (server databases
                # cannot lock a row that does not exist yet); the retry sees its row.
                if attempt == WRITE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def record_best(self, row: BestRow) -> bool:
        """Store row unless a row with the same key is as fast or faster; True if it was stored."""
        check_best(row)
        return self._write(lambda s: _upsert(s, row))

    def best_rows(
        self,
        kernel: str | None = None,
        gpu: str | None = None,
        dtype: str | None = None,
        source_hash: str | Sequence[str] | None = None,
        bucket: str | None = None,
    ) -> list[BestRow]:
        """Best rows matching every given filter (`source_hash`: one hash, or any of several), ordered by kernel,
        gpu, dtype, bucket. A row that cannot be read (a date that does not parse, text where a number belongs)
        is left out with an UnreadableRowWarning."""
        hashes = [source_hash] if isinstance(source_hash, str) or source_hash is None else list(source_hash)
        query = self._best_query(kernel=kernel, gpu=gpu, dtype=dtype, bucket=bucket)
        if hashes != [None]:
            query = query.where(BestConfig.source_hash.in_(hashes))
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
                        unreadable.append(
                            f"row {key.id} ({key.kernel} {key.dtype} {key.bucket}): "
                            + (f"{column}: " if column and column not in str(exc) else "")
                            + str(exc)
                        )
                return rows, unreadable
        except DBAPIError as exc:
            raise StoreError(f"cannot read {self.where}: {driver_said(exc)}") from None

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
        at = at or now()
        check_verification(at, seed, examples, passed, failure_json)
        stored = update(BestConfig).filter_by(**{k: getattr(row, k) for k in _KEY}, config_json=row.config_json)
        values = dict(
            verified_at=at,
            verify_seed=seed,
            verify_examples=examples,
            verify_passed=passed,
            verify_failure_json=failure_json,
        )
        return self._write(lambda s: s.execute(stored.values(**values)).rowcount == 1)

    def record_trials(self, rows: Sequence[TrialRow]) -> None:
        """Append trials, all or none."""
        for row in rows:
            check_trial(row)
        self._write(lambda s: s.add_all(TrialRecord(**row_values(row)) for row in rows))

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
            raise StoreError(f"cannot read {self.where}: {driver_said(exc)}") from None

    def export(
        self,
        path: str | os.PathLike[str],
        *,
        gpu: str | None = None,
        kernel: str | None = None,
        keep: Callable[[BestRow], bool] | None = None,
    ) -> int:
        """Write the selected best rows (those `keep` accepts, if given)
        to a new SQLite file at path; returns how many."""
        rows = [row for row in self.best_rows(kernel=kernel, gpu=gpu) if keep is None or keep(row)]
        target = os.path.abspath(path)
        open(target, "x").close()  # claims the path atomically; FileExistsError if taken
        # Rollback-journal mode keeps the file self-contained, readable from a read-only install.
        engine = open_engine(URL.create("sqlite", database=target), readonly=False, wal=False)
        try:
            prepare(engine, target, readonly=False)
            with Session(engine) as s, s.begin():
                s.add_all(BestConfig(**row_values(row)) for row in rows)
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
                check_best(row)
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
                check_best(row)
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
