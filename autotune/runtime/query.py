"""Stored best configs as a user sees them: the user database over the shipped one, with evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.runtime import database_urls
from autotune.spec import KernelSpec

if TYPE_CHECKING:
    from autotune.db import BestRow


def verification_label(row: BestRow) -> str:
    """'pass 2026-05-01' or 'FAIL 2026-05-01' (flagged: not served) after `autotune db verify`, else 'not yet'."""
    if row.verified_at is None:
        return "not yet"
    return f"{'pass' if row.verify_passed else 'FAIL'} {row.verified_at:%Y-%m-%d}"


def stored_rows(
    spec: KernelSpec, *, db_url: str | None = None, gpu: str | None = None, dtype: str | None = None
) -> list[dict]:
    """Rows of spec's best configs: from db_url alone if given, else the user and shipped databases, each
    read read-only (StoreError or FileNotFoundError where one is no autotune database this autotune reads).

    `current` says whether a row was tuned for this version of the kernel or an earlier space it `extends`
    (`KernelSpec.row_is_current`: the runtime uses only those);
    `verified` how its latest re-verification went (the runtime never serves a row that failed it); `timing`
    how its time_ms was taken (`autotune.db.rows.TIMINGS`; None for rows stored before schema version 3).
    """
    from autotune.db import ConfigStore, as_url, masked_url

    sources = [(as_url(db_url), False)] if db_url else database_urls()
    rows = []
    for url, shipped in sources:
        with ConfigStore(url, readonly=True) as store:
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
                        "timing": r.timing,
                        "default_ms": r.default_time_ms,
                        "torch_ms": r.baseline_time_ms,
                        "vs_default": r.speedup_vs_default,
                        "vs_torch": r.speedup_vs_baseline,
                        "examples": r.examples_verified,
                        "triton": r.triton_version,
                        "torch": r.torch_version,
                        "created_at": r.created_at.isoformat() if r.created_at else None,
                        "verified": verification_label(r),
                        "verified_at": r.verified_at.isoformat() if r.verified_at else None,
                        "verify_seed": r.verify_seed,
                        "verify_examples": r.verify_examples,
                        "verify_failure": r.verify_failure_json,
                        "current": spec.row_is_current(r),
                        "source": "shipped" if shipped else masked_url(url),
                    }
                )
    return rows


def gpus_with_rows_note(spec: KernelSpec, gpu: str, *, db_url: str | None = None, dtype: str | None = None) -> str:
    """Where to look when `gpu` has no rows of spec (in dtype): the GPUs that do, in the same databases."""
    others = sorted({row["gpu"] for row in stored_rows(spec, db_url=db_url, dtype=dtype)})
    what = f"{spec.name}" + (f" {dtype}" if dtype else "")
    if not others:
        return (
            f"no rows of {what} for {gpu}, nor for any other GPU, "
            f"in these databases (`autotune search {spec.name}` makes some)"
        )
    return f"no rows of {what} for {gpu}; GPUs with rows: {', '.join(others)} (pass one as --gpu)"
