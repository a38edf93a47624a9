"""Serving tuned configs at call time: the kernel registry, the databases read, and the per-kernel config tables."""

from autotune.runtime.databases import database_urls, read_rows
from autotune.runtime.lookup import (
    Choice,
    NoTunedConfigsWarning,
    StoredConfigWarning,
    TunedConfigs,
    clear_cache,
    note_launch,
    record_launches,
    tuned,
)

__all__ = [
    "Choice",
    "NoTunedConfigsWarning",
    "StoredConfigWarning",
    "TunedConfigs",
    "clear_cache",
    "database_urls",
    "note_launch",
    "read_rows",
    "record_launches",
    "tuned",
]
