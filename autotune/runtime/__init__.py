"""Serving tuned configs at call time: the kernel registry, the databases read, and the per-kernel config tables."""

from autotune.runtime.lookup import (
    Choice,
    NoTunedConfigsWarning,
    StoredConfigWarning,
    TunedConfigs,
    clear_cache,
    database_urls,
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
    "record_launches",
    "tuned",
]
