"""Config lookup at call time: in-process cache, then the user database, then the shipped one;
exact bucket, else nearest bucket, else the space's default. Stored configs are validated first, and
rows that failed re-verification (`autotune db verify`) are never served."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from autotune import gpu
from autotune.db import BestRow, masked_url
from autotune.runtime import fallback
from autotune.runtime.databases import read_rows
from autotune.space import Config, InvalidConfig, Problem
from autotune.spec import DTYPE_NAMES, KernelSpec

MAX_SHAPES_REMEMBERED = 4096


class StoredConfigWarning(UserWarning):
    """A stored config was ignored: corrupt, out of the space, or tuned for another kernel source."""


class NoTunedConfigsWarning(UserWarning):
    """No database holds a row of a kernel for this GPU: its calls launch the space's default config."""


_warned_no_rows: set[tuple[str, str]] = set()  # (kernel, gpu): said once per process

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_INTERNAL_MODULES = ("autotune", "torch", "click")  # between a user's call and the lookup: never the place to show


def _caller_stacklevel() -> int:
    """The `stacklevel` with which a warning raised by this function's caller names the first frame outside
    autotune (and torch's dispatch, and click's under the CLI): the user's call, whose line the warning shows,
    not a line of the runtime. The outermost frame where every frame is internal."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None:
        module = str(frame.f_globals.get("__name__", "")).partition(".")[0]
        if module not in _INTERNAL_MODULES and not os.path.abspath(frame.f_code.co_filename).startswith(
            _PACKAGE_DIR + os.sep
        ):
            break
        frame, level = frame.f_back, level + 1
    return level


@dataclass(frozen=True)
class Choice:
    """Where a config came from: 'exact', 'nearest', or 'default', with the bucket it was tuned for."""

    config: Config
    source: str
    bucket: str | None = None
    database: str | None = None


_launch_log: list[tuple[str, Config]] | None = None


@contextlib.contextmanager
def record_launches() -> Iterator[list[tuple[str, Config]]]:
    """Collect (kernel, config) for every tuned launch in the block: shows which config really ran."""
    global _launch_log
    previous, _launch_log = _launch_log, []
    try:
        yield _launch_log
    finally:
        _launch_log = previous


def note_launch(kernel: str, config: Config) -> None:
    if _launch_log is not None:
        _launch_log.append((kernel, dict(config)))


class TunedConfigs:
    """The configs one kernel launches with, per (dtype, bucket), resolved once and cached."""

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self._cache: dict[tuple[torch.dtype, str], Config] = {}
        self._by_key: dict[tuple[torch.dtype, Hashable], Config] = {}
        self._choices: dict[tuple[torch.dtype, str], Choice] = {}
        self._among: dict[tuple[torch.dtype, str, str], Config] = {}
        self._stored: dict[torch.dtype, list[tuple[str, Config, str]]] = {}
        self._derived: dict[Hashable, Any] = {}

    def config(self, dtype: torch.dtype, bucket: str, problem: Callable[[], Problem]) -> Config:
        """The config for a call (hot path: one dict lookup once resolved)."""
        cfg = self._cache.get((dtype, bucket))
        if cfg is None:
            cfg = self.resolve(dtype, bucket, problem()).config
        return cfg

    def lookup(
        self, dtype: torch.dtype, key: Hashable, bucket: Callable[[], str], problem: Callable[[], Problem]
    ) -> Config:
        """The config for a call, memoized by an exact-shape key (hot path: one dict lookup)."""
        cfg = self._by_key.get((dtype, key))
        if cfg is None:
            if len(self._by_key) > MAX_SHAPES_REMEMBERED:
                self._by_key.clear()
            cfg = self._by_key[(dtype, key)] = self.config(dtype, bucket(), problem)
        return cfg

    def derived(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """make(), memoized by key and forgotten with the configs: what a kernel derives from a call's
        config (its grid and launch arguments), so a repeated call rebuilds none of it."""
        value = self._derived.get(key)
        if value is None:
            if len(self._derived) > MAX_SHAPES_REMEMBERED:
                self._derived.clear()
            value = self._derived[key] = make()
        return value

    def resolve(self, dtype: torch.dtype, bucket: str, problem: Problem) -> Choice:
        """Pick and cache the config for a bucket, saying where it came from."""
        stored = self._stored.get(dtype)
        if stored is None:
            stored = self._stored[dtype] = self._load(dtype)
        choice = _choose(self.spec, stored, bucket, self.spec.problem_for(problem, dtype))
        self._cache[(dtype, bucket)] = choice.config
        self._choices[(dtype, bucket)] = choice
        return choice

    def config_among(
        self,
        dtype: torch.dtype,
        bucket: str,
        problem: Callable[[], Problem],
        kind: str,
        accept: Callable[[Config], bool],
    ) -> Config:
        """The config for a bucket among the stored configs `accept` takes (this bucket's, else the nearest
        bucket's, else the default), cached per `kind`: for a call the bucket's own config cannot run (a layout one
        engine cannot read), the best stored config of the rest, a row its bucket's winner shadows included."""
        cfg = self._among.get((dtype, bucket, kind))
        if cfg is None:
            stored = self._stored.get(dtype)
            if stored is None:
                stored = self._stored[dtype] = self._load(dtype)
            accepted = [row for row in stored if accept(row[1])]
            cfg = _choose(self.spec, accepted, bucket, self.spec.problem_for(problem(), dtype)).config
            self._among[(dtype, bucket, kind)] = cfg
        return cfg

    def choice(self, dtype: torch.dtype, bucket: str) -> Choice | None:
        """How the cached config for a bucket was chosen, if it has been."""
        return self._choices.get((dtype, bucket))

    def clear(self) -> None:
        """Forget cached configs and stored rows (after the database changed)."""
        self._cache.clear()
        self._by_key.clear()
        self._derived.clear()
        self._choices.clear()
        self._among.clear()
        self._stored.clear()

    def _load(self, dtype: torch.dtype) -> list[tuple[str, Config, str]]:
        gpu_name = gpu.current_gpu().name
        rows: list[tuple[str, Config, str]] = []
        shadowed: list[tuple[str, Config, str]] = []  # rows a bucket's winner hides: after every winner
        seen: set[str] = set()
        ignored: list[str] = []
        # No rows for this GPU in this dtype: those of its family's nearest GPU tuned in it that fit it serve.
        this_gpu = read_rows(self.spec.name, gpu=gpu_name)
        consulted = fallback.when_untuned(self.spec, gpu_name, this_gpu, DTYPE_NAMES[dtype])
        any_rows = False
        candidates: list[tuple[str, BestRow]] = []
        for url, found in consulted:
            if isinstance(found, Exception):
                ignored.append(f"database {masked_url(url)} unreadable ({type(found).__name__}: {found})")
                continue
            any_rows = any_rows or bool(found)
            # flagged: failed re-verification
            candidates += [(url, row) for row in found if row.dtype == DTYPE_NAMES[dtype] and not row.flagged]
        # A row of this source, in any database, serves before a row of an earlier space it extends (`extends`).
        current = {id(row) for row in self.spec.current_rows(row for _, row in candidates)}
        for url, row in candidates:
            hidden = id(row) not in current
            if hidden and not self.spec.row_is_current(row):  # else a row of this source holds its bucket
                ignored.append(f"bucket {row.bucket}: tuned for another kernel source ({row.source_hash})")
                continue
            try:
                config = self.spec.space.validate(self.spec.current_config(row))
            except (ValueError, InvalidConfig) as exc:
                if not hidden:
                    ignored.append(f"bucket {row.bucket}: {exc}")
                continue
            if hidden or row.bucket in seen:  # the user database overlays the shipped one
                shadowed.append((row.bucket, config, url))
            else:
                seen.add(row.bucket)
                rows.append((row.bucket, config, url))
        if ignored:
            warnings.warn(
                f"autotune: ignored {len(ignored)} stored config(s) for {self.spec.name} "
                f"{DTYPE_NAMES[dtype]} on {gpu_name}: " + "; ".join(ignored[:5]),
                StoredConfigWarning,
                stacklevel=_caller_stacklevel(),
            )
        if not any_rows and (self.spec.name, gpu_name) not in _warned_no_rows:
            _warned_no_rows.add((self.spec.name, gpu_name))
            warnings.warn(
                f"autotune: no tuned configs for {self.spec.name} on {gpu_name} in the {len(consulted)} database(s) "
                "consulted, so no exact or nearest bucket to take: it launches its default config here "
                f"(`autotune search {self.spec.name}` tunes it for this GPU)",
                NoTunedConfigsWarning,
                stacklevel=_caller_stacklevel(),
            )
        return rows + shadowed


def _choose(spec: KernelSpec, stored: list[tuple[str, Config, str]], bucket: str, problem: Problem) -> Choice:
    runnable = [(b, c, url) for b, c, url in stored if spec.space.rejects(c, problem) is None]
    for b, c, url in runnable:
        if b == bucket:
            return Choice(c, "exact", b, url)
    if runnable:
        b, c, url = min(runnable, key=lambda r: spec.bucket_distance(r[0], bucket))
        if spec.bucket_distance(b, bucket) < float("inf"):
            return Choice(c, "nearest", b, url)
    return Choice(dict(spec.space.default), "default")


_TABLES: dict[str, TunedConfigs] = {}


def tuned(spec: KernelSpec) -> TunedConfigs:
    """The process-wide config table of a kernel."""
    table = _TABLES.get(spec.name)
    if table is None or table.spec is not spec:
        table = _TABLES[spec.name] = TunedConfigs(spec)
    return table


def clear_cache() -> None:
    """Forget every cached config, so the next call reads the databases again."""
    for table in _TABLES.values():
        table.clear()
