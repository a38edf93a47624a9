"""Storing a best-config row straight into a test's user database, as a finished search would; reading the shipped
database's rows."""

from __future__ import annotations

import json

from autotune import db, gpu, runtime
from autotune.db import BestRow, ConfigStore
from autotune.spec import KernelSpec


def store_best(
    db_path,
    spec: KernelSpec,
    bucket: str,
    config: dict,
    dtype: str = "fp32",
    problem: dict | None = None,
    source_hash: str | None = None,
) -> None:
    """A row for spec's current source (or `source_hash`) on this machine's GPU, timed on `problem`; the
    runtime's caches are cleared so calls read it."""
    with ConfigStore(str(db_path)) as store:
        store.record_best(
            BestRow(
                kernel=spec.name,
                source_hash=source_hash or spec.source_hash,
                gpu=gpu.current_gpu().name,
                device_name="test",
                dtype=dtype,
                bucket=bucket,
                config_json=json.dumps(config),
                problem_json=json.dumps(problem or {}),
                time_ms=1.0,
                examples_verified=1,
                triton_version="x",
                torch_version="y",
            )
        )
    runtime.clear_cache()


def shipped_rows(kernel: str) -> list[BestRow]:
    """kernel's rows in the package's shipped database, read without writing."""
    with ConfigStore(db.as_url(str(db.shipped_path())), readonly=True) as store:
        return store.best_rows(kernel=kernel)
