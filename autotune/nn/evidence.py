"""The evidence the "measured" policy reads: the stored rows of the kernels a call launches, for this GPU, its dtype
and each launch's bucket. A row carries time_ms (the kernel) and baseline_time_ms (torch, on the same problem, in
the same process); a call runs the kernels only where, summed over its launches, the kernels' times are at most
the time of the torch work they replace. Only a bucket's own row counts: a nearest bucket's row was measured on
another shape, and the default config on none.

What a row's torch time covers is the kernel spec's baseline, which is not always the torch call a launch replaces:
the norms', attention's and rope's backward baselines run torch's forward again before its backward (so the
forward's own torch time is not added for that pair), and flash_attn's forward baseline also computes the
log-sum-exp, which sdpa does not return (so a forward-only attention call has no evidence against sdpa alone: torch
runs it)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from autotune import gpu, runtime
from autotune.db import BestRow
from autotune.runtime.registry import get
from autotune.spec import DTYPE_NAMES

BASELINE_ADDS_FORWARD = frozenset({"layer_norm_backward", "rms_norm_backward", "flash_attn_backward", "rope_backward"})
"""Backward kernels whose stored torch time is torch's forward and backward together (their specs' baselines)."""
BASELINE_ADDS_WORK = {
    "flash_attn": "its stored torch time also computes the log-sum-exp, which sdpa does not, so it "
    "is no evidence against sdpa alone"
}
"""Kernels whose stored torch time includes work the replaced torch call does not do, and what that work is."""


@dataclass(frozen=True)
class Row:
    """One launch's stored row: its kernel's time and torch's, or `missing`, why there is no usable row."""

    kernel: str
    dtype: str
    bucket: str
    time_ms: float | None = None
    baseline_time_ms: float | None = None
    missing: str | None = None

    def describe(self) -> str:
        where = f"{self.kernel} {self.dtype} {self.bucket}"
        if self.missing is not None:
            return f"{where}: {self.missing}"
        return f"{where}: {self.time_ms:.4g} ms, torch {self.baseline_time_ms:.4g} ms"


@dataclass(frozen=True)
class Judgement:
    """Whether a call's kernels are at least as fast as the torch work they replace, with the numbers and why."""

    at_least_as_fast: bool
    rows: tuple[Row, ...]
    why: str
    kernels_ms: float | None = None
    torch_ms: float | None = None


_ROWS: dict[tuple[str, torch.dtype, str], Row] = {}
_READ: dict[tuple[str, str], dict[tuple[str, str, str], BestRow]] = {}  # (kernel, gpu) -> (url, dtype, bucket) -> row


def judge(launches: list[tuple[str, dict]], dtype: torch.dtype) -> Judgement:
    """Judge a call that makes `launches` ((kernel, problem) each, a backward after its forward) in dtype."""
    rows = tuple(row(kernel, dtype, problem) for kernel, problem in launches)
    missing = [r for r in rows if r.missing is not None]
    if missing:
        return Judgement(False, rows, "; ".join(r.describe() for r in missing))
    kernels = {r.kernel for r in rows}
    torch_ms = 0.0
    for r in rows:
        if r.kernel + "_backward" in kernels and r.kernel + "_backward" in BASELINE_ADDS_FORWARD:
            continue  # its backward's torch time has torch's forward in it already
        if r.kernel in BASELINE_ADDS_WORK:
            return Judgement(False, rows, f"{r.kernel}: {BASELINE_ADDS_WORK[r.kernel]}")
        torch_ms += r.baseline_time_ms
    kernels_ms = sum(r.time_ms for r in rows)
    faster = kernels_ms <= torch_ms
    why = (
        f"kernels {kernels_ms:.4g} ms {'<=' if faster else '>'} torch {torch_ms:.4g} ms ("
        + "; ".join(r.describe() for r in rows)
        + ")"
    )
    return Judgement(faster, rows, why, kernels_ms, torch_ms)


def row(kernel: str, dtype: torch.dtype, problem: dict) -> Row:
    """kernel's row for problem's bucket in dtype on this GPU (the row it would launch), read once per bucket."""
    spec = get(kernel)
    problem = spec.problem_for(problem, dtype)
    bucket = spec.bucket(problem)
    key = (kernel, dtype, bucket)
    found = _ROWS.get(key)
    if found is None:
        found = _ROWS[key] = _find(kernel, dtype, bucket, problem)
    return found


def _find(kernel: str, dtype: torch.dtype, bucket: str, problem: dict) -> Row:
    spec = get(kernel)
    dtype_name = DTYPE_NAMES[dtype]
    with warnings.catch_warnings():
        # "no rows: it launches its default config" is not what happens here: torch runs the call instead.
        warnings.simplefilter("ignore", runtime.NoTunedConfigsWarning)
        choice = runtime.tuned(spec).resolve(dtype, bucket, problem)
    gpu_name = gpu.current_gpu().name
    if choice.source != "exact":
        nearest = f" (the nearest stored bucket, {choice.bucket}, was timed on another shape)" if choice.bucket else ""
        return Row(kernel, dtype_name, bucket, missing=f"no stored row for this bucket on {gpu_name}{nearest}")
    stored = _rows(spec.name, gpu_name).get((choice.database or "", dtype_name, bucket))
    if stored is None:  # the exact bucket's row is another GPU's (runtime.fallback): timed there, not here
        missing = f"no stored row for this bucket on {gpu_name} (another GPU's serves it)"
        return Row(kernel, dtype_name, bucket, missing=missing)
    if stored.baseline_time_ms is None:
        return Row(kernel, dtype_name, bucket, missing="its stored row has no torch time to compare with")
    return Row(kernel, dtype_name, bucket, stored.time_ms, stored.baseline_time_ms)


def _rows(kernel: str, gpu_name: str) -> dict[tuple[str, str, str], BestRow]:
    """This GPU's rows of kernel for its current source, by (database url, dtype, bucket); read once."""
    rows = _READ.get((kernel, gpu_name))
    if rows is None:
        rows = {}
        spec = get(kernel)
        for url, found in runtime.read_rows(kernel, source_hash=spec.current_hashes, gpu=gpu_name):
            if not isinstance(found, Exception):  # the runtime already said it could not read this database
                rows.update({(url, r.dtype, r.bucket): r for r in spec.current_rows(found)})
        _READ[(kernel, gpu_name)] = rows
    return rows


def clear() -> None:
    """Forget every row read (after a database changed; `runtime.clear_cache()` too)."""
    _ROWS.clear()
    _READ.clear()
