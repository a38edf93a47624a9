"""Which databases are read, and how: the user database (if it exists) overlays the shipped one. The runtime
serves configs from them and a search takes its neighbours' winners from them; nothing else decides."""

from __future__ import annotations

import os
from collections.abc import Sequence

from autotune import db
from autotune.db import BestRow, ConfigStore


def database_urls() -> list[tuple[str, bool]]:
    """(url, shipped) of the databases the runtime reads, most preferred first: the user database (unless it
    is a SQLite file that does not exist) and the shipped one. Each is opened read-only: reading a database
    never creates, upgrades or changes it."""
    urls: list[tuple[str, bool]] = []
    user = db.default_url()
    path = db.sqlite_path(user)
    if path is None or os.path.exists(path):
        urls.append((user, False))
    shipped = db.shipped_path()
    if shipped.exists():
        urls.append((db.as_url(str(shipped)), True))
    return urls


def read_rows(
    kernel: str,
    *,
    source_hash: str | Sequence[str] | None = None,
    gpu: str | None = None,
    skip: ConfigStore | None = None,
    shipped_only: bool = False,
) -> list[tuple[str, list[BestRow] | Exception]]:
    """Each database's best rows of kernel matching the filters (`source_hash`: one, or any of several, as a spec's
    `current_hashes`), most preferred database first: (url, rows),
    or (url, the exception) for a database that cannot be read. `skip`: a store already read by the caller;
    `shipped_only`: the database shipped in the package alone.
    A url may hold a password: print it through `db.masked_url`."""
    found: list[tuple[str, list[BestRow] | Exception]] = []
    for url, shipped in database_urls():
        if (skip is not None and skip.url == url) or (shipped_only and not shipped):
            continue
        try:
            with ConfigStore(url, readonly=True) as store:
                found.append((url, store.best_rows(kernel=kernel, source_hash=source_hash, gpu=gpu)))
        except Exception as exc:  # an unreadable database must not break a kernel call or a search
            found.append((url, exc))
    return found
