"""A best row planted in a test's database with ConfigStore, as a search on this machine would store it: the kernel's
default config (or the one given) under its current source hash, for this GPU, in fp32 (or the dtype given), with the
times given."""

from __future__ import annotations

import json

import autotune
from autotune import gpu, runtime
from autotune.db import BestRow, ConfigStore


def store(
    db_path,
    kernel: str,
    bucket: str,
    time_ms: float,
    baseline_time_ms: float | None,
    gpu_name: str | None = None,
    problem: dict | None = None,
    config: dict | None = None,
    dtype: str = "fp32",
) -> None:
    """Record kernel's row for bucket in the SQLite file db_path (for gpu_name, else this machine's GPU; with the
    problem it was timed on, which serving it on another GPU checks it against); the runtime then reads the databases
    afresh."""
    spec = autotune.get(kernel)
    with ConfigStore(str(db_path)) as s:
        s.record_best(
            BestRow(
                kernel=kernel,
                source_hash=spec.source_hash,
                gpu=gpu_name or gpu.current_gpu().name,
                device_name="test",
                dtype=dtype,
                bucket=bucket,
                config_json=json.dumps(spec.space.default if config is None else config),
                problem_json=json.dumps(problem or {}),
                time_ms=time_ms,
                baseline_time_ms=baseline_time_ms,
                examples_verified=1,
                triton_version="x",
                torch_version="y",
            )
        )
    runtime.clear_cache()
