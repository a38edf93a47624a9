"""The evidence the "measured" policy reads: whether the row a kernel would launch for a (GPU, dtype, bucket)
shows it at least as fast as torch on that bucket (the row's time_ms <= its baseline_time_ms, both measured in one
process by the search that stored it). Only the bucket's own row counts: a nearest bucket's row was measured on
another shape, and the default config on none."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from autotune import gpu, runtime
from autotune.db import BestRow
from autotune.runtime.registry import get
from autotune.spec import DTYPE_NAMES


@dataclass(frozen=True)
class Verdict:
    """What the stored row of one kernel, dtype and bucket says: `why_not` is None where it shows the kernel at
    least as fast as torch, else the reason it does not."""

    kernel: str
    dtype: str
    bucket: str
    time_ms: float | None = None
    baseline_time_ms: float | None = None
    why_not: str | None = None

    @property
    def at_least_as_fast(self) -> bool:
        return self.why_not is None

    def describe(self) -> str:
        where = f"{self.kernel} {self.dtype} {self.bucket}"
        if self.why_not is not None:
            return f"{where}: {self.why_not}"
        return f"{where}: {self.time_ms:.4g} ms, torch {self.baseline_time_ms:.4g} ms"


_VERDICTS: dict[tuple[str, torch.dtype, str], Verdict] = {}
_ROWS: dict[tuple[str, str], dict[tuple[str, str, str], BestRow]] = {}  # (kernel, gpu) -> (url, dtype, bucket) -> row


def verdict(kernel: str, dtype: torch.dtype, problem: dict) -> Verdict:
    """The verdict of kernel's stored row for problem's bucket in dtype on this GPU, judged once per bucket."""
    spec = get(kernel)
    problem = spec.problem_for(problem, dtype)
    bucket = spec.bucket(problem)
    key = (kernel, dtype, bucket)
    found = _VERDICTS.get(key)
    if found is None:
        found = _VERDICTS[key] = _judge(kernel, dtype, bucket, problem)
    return found


def _judge(kernel: str, dtype: torch.dtype, bucket: str, problem: dict) -> Verdict:
    spec = get(kernel)
    dtype_name = DTYPE_NAMES[dtype]
    with warnings.catch_warnings():
        # "no rows: it launches its default config" is not what happens here: torch runs the call instead.
        warnings.simplefilter("ignore", runtime.NoTunedConfigsWarning)
        choice = runtime.tuned(spec).resolve(dtype, bucket, problem)  # the row the kernel would launch
    gpu_name = gpu.current_gpu().name
    if choice.source != "exact":
        nearest = f" (the nearest stored bucket, {choice.bucket}, was timed on another shape)" if choice.bucket else ""
        return Verdict(kernel, dtype_name, bucket, why_not=f"no stored row for this bucket on {gpu_name}{nearest}")
    row = _rows(spec.name, gpu_name).get((choice.database or "", dtype_name, bucket))
    if row is None or row.baseline_time_ms is None:
        return Verdict(kernel, dtype_name, bucket, why_not="its stored row has no torch time to compare with")
    if row.time_ms > row.baseline_time_ms:
        slower = f"its stored row is slower than torch ({row.time_ms:.4g} ms, torch {row.baseline_time_ms:.4g} ms)"
        return Verdict(kernel, dtype_name, bucket, row.time_ms, row.baseline_time_ms, why_not=slower)
    return Verdict(kernel, dtype_name, bucket, row.time_ms, row.baseline_time_ms)


def _rows(kernel: str, gpu_name: str) -> dict[tuple[str, str, str], BestRow]:
    """This GPU's rows of kernel for its current source, by (database url, dtype, bucket); read once."""
    rows = _ROWS.get((kernel, gpu_name))
    if rows is None:
        rows = {}
        for url, found in runtime.read_rows(kernel, source_hash=get(kernel).source_hash, gpu=gpu_name):
            if not isinstance(found, Exception):  # the runtime already said it could not read this database
                rows.update({(url, row.dtype, row.bucket): row for row in found})
        _ROWS[(kernel, gpu_name)] = rows
    return rows


def clear() -> None:
    """Forget every verdict and row read (after a database changed; `runtime.clear_cache()` too)."""
    _VERDICTS.clear()
    _ROWS.clear()
