"""Tuned-config storage: a read-only database shipped in the package, overlaid by a user database."""

from pathlib import Path

from autotune.db.connect import as_url, default_url, masked_url, sqlite_path
from autotune.db.errors import MergeError, SchemaVersionError, StoreError, UnreadableRowWarning
from autotune.db.models import SCHEMA_VERSION
from autotune.db.rows import BestRow, TrialRow
from autotune.db.store import ConfigStore, rows_to_merge


def shipped_path() -> Path:
    """Where the database shipped with the package lives (the file may not exist)."""
    return Path(__file__).with_name("shipped.sqlite")


__all__ = [
    "SCHEMA_VERSION",
    "BestRow",
    "ConfigStore",
    "MergeError",
    "SchemaVersionError",
    "StoreError",
    "TrialRow",
    "UnreadableRowWarning",
    "as_url",
    "default_url",
    "masked_url",
    "rows_to_merge",
    "shipped_path",
    "sqlite_path",
]
