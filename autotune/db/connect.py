"""Opening a database as asked: a URL or a path, read-only (never creating, changing or upgrading anything) or for
writing (created or upgraded first, refused if it is not autotune's or cannot be written)."""

from __future__ import annotations

import os
import re
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, insert, inspect, make_url, select, update
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError, ProgrammingError

from autotune.db import migrations
from autotune.db.errors import SchemaVersionError, StoreError
from autotune.db.models import SCHEMA_VERSION, Base, BestConfig, SchemaInfo, TrialRecord
from autotune.db.rows import BEST_FIELDS

_BUSY_TIMEOUT_MS = 30_000
WRITE_RETRIES = 5
IMMEDIATE = "autotune_begin_immediate"  # execution option read by the SQLite begin hook


def masked_url(url: str | URL) -> str:
    """url as it may be printed: any password replaced by ***."""
    try:
        parsed = make_url(url)
        return str(url) if parsed.password is None else parsed.render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", str(url))


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
        database in ("", ":memory:")
        or database.startswith("file::memory:")
        or "mode=memory" in database
        or parsed.query.get("mode") == "memory"
    )


def where_of(url: str) -> str:
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
        immediate = conn.get_execution_options().get(IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate and not readonly else "BEGIN")

    return engine


def open_engine(url: str | URL, *, readonly: bool, wal: bool = True) -> Engine:
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


def prepare(engine: Engine, where: str, *, readonly: bool) -> tuple[int, int | None]:
    """(schema version it is read at, version found) once the database is known to be an autotune database:
    a reader takes it as it is; a writer first makes a database with no tables a fresh one or upgrades an
    older one, and makes sure it can write at all. StoreError for anything else, before any change."""
    if readonly:
        with engine.connect() as conn:
            found = _check_autotune(conn, where, writing=False)
        return found, found
    for attempt in range(WRITE_RETRIES):
        changing = False  # creating or upgrading the tables, which another process may be doing at the same time
        try:
            with engine.execution_options(**{IMMEDIATE: True}).connect() as conn, conn.begin() as tx:
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
            if not changing or attempt == WRITE_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def readable_fields(engine: Engine, version: int) -> tuple[str, ...]:
    """The BestRow fields a database of this version has columns for (an older read-only one lacks some)."""
    if version == SCHEMA_VERSION:
        return BEST_FIELDS
    with engine.connect() as conn:
        missing = set(migrations.missing_columns(conn, BestConfig.__table__))
    return tuple(f for f in BEST_FIELDS if BestConfig.__mapper__.attrs[f].columns[0].name not in missing)
