"""A study's first trials, from what the databases already know: the stored best, earlier sources' winners,
the space's own starts and the winners of neighbouring searches; and the failures recorded on its bucket."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from autotune import gpu, runtime
from autotune.db import BestRow, ConfigStore
from autotune.gate.verify import KnownFailure
from autotune.identity import RowKey
from autotune.space import Config, Problem
from autotune.spec import KernelSpec, dtype_from_name

NEIGHBOUR_WARM_STARTS = 3
"""How many winners of neighbouring searches a study also tries first (see `warm_starts`)."""
EARLIER_SOURCE_WARM_STARTS = 2
"""How many winners of this bucket under earlier sources of the kernel a study also tries first."""


def bucket_failures(store: ConfigStore | None, key: RowKey) -> list[KnownFailure]:
    """The failing problems (and seeds) that re-verification recorded on this bucket's flagged rows, of any
    source of the kernel: a search checks every config on them first, so a config that was fast but
    wrong there cannot win again on inputs that happen to pass."""
    if store is None:
        return []
    rows = store.best_rows(kernel=key.kernel, gpu=key.gpu, dtype=key.dtype, bucket=key.bucket)
    return [failure for row in rows if (failure := row.recorded_failure) is not None]


def warm_starts(
    spec: KernelSpec,
    store: ConfigStore | None,
    key: RowKey,
    problem: Problem | None = None,
    given: Sequence[Config] = (),
) -> list[Config]:
    """The configs a study tries first: the space's default, then the best stored for its bucket, if any (of
    this source, then of the earlier spaces it `extends`), then the `given` configs (a user's `--warm-start`:
    named, so tried before any guess of ours), then, given the problem, the config the runtime serves the bucket
    now (`served`: the nearest bucket's row, or another GPU's), so that what a search stores was measured against
    what it replaces, then (up to EARLIER_SOURCE_WARM_STARTS) this bucket's
    winners under other earlier sources of the kernel in `store`, newest first, where their configs are still in
    the space: a changed kernel is re-tuned from where its last search ended.

    Given the problem, then the space's own starts for it (`SearchSpace.starts`: configs known to do well on
    such problems), and up to NEIGHBOUR_WARM_STARTS winners of neighbouring searches that run on it,
    nearest first: this bucket in another dtype or on another GPU, then the nearest buckets (from `store`
    and the shipped database). Each is only a first guess, measured here like any trial."""
    now = served(spec, key, problem) if problem is not None else None
    named = [*given, *([now] if now is not None else [])]  # placed before our guesses
    configs = [dict(spec.space.default)]
    guesses_from = len(configs)
    if store is not None:
        rows = [
            row
            for row in store.best_rows(kernel=key.kernel, gpu=key.gpu, dtype=key.dtype, bucket=key.bucket)
            if not row.flagged
        ]
        # This source's row, then those of the earlier spaces it extends: their configs are this kernel's code.
        current = [row for row in rows if spec.row_is_current(row)]
        current.sort(key=lambda row: spec.age(row.source_hash))  # the newest version's row first: the one served
        configs += [config for row in current if (config := _stored_config(spec, row)) is not None]
        guesses_from = len(configs)
        earlier: list[Config] = []
        older_rows = [row for row in rows if not spec.row_is_current(row)]
        for row in sorted(older_rows, key=lambda row: row.created_at, reverse=True):
            if len(earlier) == EARLIER_SOURCE_WARM_STARTS:
                break
            config = _stored_config(spec, row)
            if (
                config is not None
                and config not in configs
                and config not in named
                and config not in earlier
                and (problem is None or spec.space.rejects(config, problem) is None)
            ):
                earlier.append(config)
        configs += earlier
    if problem is not None:
        configs += [config for config in spec.space.starts(problem) if config not in configs]
        neighbours: list[Config] = []
        for config in _neighbour_winners(spec, store, key, problem):
            if len(neighbours) == NEIGHBOUR_WARM_STARTS:
                break
            if config not in configs and config not in named and config not in neighbours:
                neighbours.append(config)
        configs += neighbours
    return _given_first(configs, guesses_from, named)


def served(spec: KernelSpec, key: RowKey, problem: Problem) -> Config | None:
    """The config the runtime serves key's bucket on this GPU now (from the user's and the shipped databases: its
    own row, the nearest bucket's, or another GPU's of the family), None where it serves the space's default."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # said to whoever calls the kernel, not to a search
        choice = runtime.TunedConfigs(spec).resolve(dtype_from_name(key.dtype), key.bucket, problem)
    return None if choice.source == "default" else choice.config


def cold_starts(spec: KernelSpec, problem: Problem, given: Sequence[Config] = ()) -> list[Config]:
    """The first trials of a study that reads no database: the space's default, the `given` configs, then the
    space's own starts."""
    configs = [dict(spec.space.default)]
    configs += [config for config in spec.space.starts(problem) if config not in configs]
    return _given_first(configs, 1, given)


def _given_first(configs: list[Config], at: int, given: Sequence[Config]) -> list[Config]:
    """configs with `given` inserted at index `at`, each config once (its first place kept)."""
    ordered: list[Config] = []
    for config in [*configs[:at], *given, *configs[at:]]:
        if config not in ordered:
            ordered.append(config)
    return ordered


def _stored_config(spec: KernelSpec, row: BestRow) -> Config | None:
    """row's config if it belongs to spec's space; None for a corrupt row or one from a space without it."""
    try:
        return spec.space.validate(spec.current_config(row))
    except ValueError:
        return None


def _neighbour_winners(spec: KernelSpec, store: ConfigStore | None, key: RowKey, problem: Problem) -> list[Config]:
    """Stored bests of this kernel's source other than this search's own row that run on `problem`, nearest
    bucket first, then the same dtype, then the same GPU (other GPUs' only on a GPU)."""
    rows = [] if store is None else store.best_rows(kernel=key.kernel, source_hash=spec.current_hashes)
    # The search's own store, and the shipped rows: a search sees what it will store into and what ships, as the
    # runtime serves them, but no other database (a search into another file never takes the user database's rows).
    for _url, found in runtime.read_rows(key.kernel, source_hash=spec.current_hashes, skip=store, shipped_only=True):
        if not isinstance(found, Exception):  # an unreadable database offers no first guesses
            rows += found
    rows = spec.current_rows(rows)
    # Under the interpreter a GPU's winner is no better a guess than any other config.
    other_gpus = not gpu.current_gpu().is_interpreter
    ranked = []
    for row in rows:
        if row.flagged or (row.gpu, row.dtype, row.bucket) == (key.gpu, key.dtype, key.bucket):
            continue
        if row.gpu != key.gpu and not other_gpus:
            continue
        distance = spec.bucket_distance(row.bucket, key.bucket)
        config = _stored_config(spec, row)
        if config is not None and distance < float("inf") and spec.space.rejects(config, problem) is None:
            ranked.append(((distance, row.dtype != key.dtype, row.gpu != key.gpu), config))
    ranked.sort(key=lambda r: r[0])
    return [config for _, config in ranked]
