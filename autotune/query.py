"""Stored best configs as a user sees them: the user database over the shipped one, with evidence."""

from __future__ import annotations

from autotune.runtime import database_urls
from autotune.spec import KernelSpec


def stored_rows(
    spec: KernelSpec, *, db_url: str | None = None, gpu: str | None = None, dtype: str | None = None
) -> list[dict]:
    """Rows of spec's best configs: from db_url alone if given, else the user and shipped databases.

    `current` says whether a row was tuned for this version of the kernel (the runtime uses only those).
    """
    from autotune.db import ConfigStore, as_url

    sources = [(as_url(db_url), False)] if db_url else database_urls()
    rows = []
    for url, readonly in sources:
        with ConfigStore(url, readonly=readonly) as store:
            for r in store.best_rows(kernel=spec.name, gpu=gpu, dtype=dtype):
                rows.append(
                    {
                        "kernel": r.kernel,
                        "gpu": r.gpu,
                        "device_name": r.device_name,
                        "dtype": r.dtype,
                        "bucket": r.bucket,
                        "config": r.config_json,
                        "time_ms": r.time_ms,
                        "default_ms": r.default_time_ms,
                        "torch_ms": r.baseline_time_ms,
                        "vs_default": r.speedup_vs_default,
                        "vs_torch": r.speedup_vs_baseline,
                        "examples": r.examples_verified,
                        "triton": r.triton_version,
                        "torch": r.torch_version,
                        "created_at": r.created_at.isoformat() if r.created_at else None,
                        "current": r.source_hash == spec.source_hash,
                        "source": "shipped" if readonly else url,
                    }
                )
    return rows
