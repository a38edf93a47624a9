"""Older autotune databases: upgraded in place when opened for writing, read as they are when read-only.

Every schema change so far only added nullable columns, so an upgrade adds the columns a table lacks
and a reader selects the columns that are there (the others read as None).
"""

from __future__ import annotations

from sqlalchemy import Connection, Table, inspect, update
from sqlalchemy.schema import CreateColumn

from autotune.db.models import SCHEMA_VERSION, BestConfig, SchemaInfo

UPGRADABLE = (1, 2)
"""Schema versions this autotune can upgrade to SCHEMA_VERSION (and read without upgrading)."""

_GROWN = (BestConfig.__table__,)  # the tables that gained columns since version 1 (verification; timing in 3)


def missing_columns(conn: Connection, table: Table) -> list[str]:
    """Names of table's columns that the database's copy of it lacks."""
    present = {c["name"] for c in inspect(conn).get_columns(table.name)}
    return [c.name for c in table.columns if c.name not in present]


def upgrade(conn: Connection, found: int) -> None:
    """Bring a database of schema version `found` to SCHEMA_VERSION, inside the caller's transaction."""
    if found not in UPGRADABLE:
        raise ValueError(f"schema version {found} cannot be upgraded; expected one of {UPGRADABLE}")
    quote = conn.dialect.identifier_preparer.quote
    for table in _GROWN:
        for name in missing_columns(conn, table):
            column = table.c[name]
            if not column.nullable:
                raise AssertionError(f"{table.name}.{name} is NOT NULL: existing rows would need a value")
            definition = CreateColumn(column).compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {quote(table.name)} ADD COLUMN {definition}")
    conn.execute(update(SchemaInfo).values(version=SCHEMA_VERSION))
