"""The rows a database holds, as Python sees them (best configs, trials), and what makes one valid."""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.exc import DBAPIError

from autotune.identity import OUTCOMES

TIMINGS = ("graph", "do_bench", "wall")
"""How a row's time_ms was taken (`bench.kernel_time`): do_bench of the call's CUDA-graph replay, the GPU's time
alone; do_bench of the call itself, host time included wherever it outlasts the L2 clear (a call that cannot be
captured, and every search before the graph timing); wall clock under the interpreter. None: not recorded."""


def now() -> datetime:
    return datetime.now(timezone.utc)


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None


def json_object(text: str, what: str) -> dict[str, Any]:
    value = _json(text, what)
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


@dataclass(frozen=True, kw_only=True)
class BestRow:
    """The fastest verified config for one (kernel, source_hash, gpu, dtype, bucket), with its evidence."""

    kernel: str
    source_hash: str
    gpu: str
    device_name: str
    dtype: str
    bucket: str
    config_json: str
    problem_json: str
    time_ms: float
    default_time_ms: float | None = None
    baseline_time_ms: float | None = None
    timing: str | None = None  # how time_ms was taken: one of TIMINGS, None where not recorded
    examples_verified: int
    triton_version: str
    torch_version: str
    created_at: datetime = field(default_factory=now)
    verified_at: datetime | None = None
    verify_seed: int | None = None
    verify_examples: int | None = None
    verify_passed: bool | None = None
    verify_failure_json: str | None = None
    id: int | None = None

    @property
    def config(self) -> dict[str, Any]:
        """The config as a dict; ValueError if the stored JSON is not an object."""
        return json_object(self.config_json, "config_json")

    @property
    def flagged(self) -> bool:
        """Failed its latest re-verification: the runtime no longer serves it."""
        return self.verify_passed is False

    @property
    def verify_failure(self) -> dict[str, Any] | None:
        """Why the latest re-verification failed (the minimal failing problem and the reason), if it did."""
        return (
            None if self.verify_failure_json is None else json_object(self.verify_failure_json, "verify_failure_json")
        )

    @property
    def recorded_failure(self) -> tuple[dict[str, Any], int] | None:
        """(problem, seed of its inputs) on which the latest re-verification failed, if it failed on one:
        a later check of this bucket runs it again (see verify's known_failures)."""
        failure = self.verify_failure if self.flagged else None
        # A failure recorded without its seed (before failures kept one) failed on the run's own seed.
        seed = failure.get("seed", self.verify_seed) if failure else None
        if not failure or not isinstance(failure.get("problem"), dict) or not isinstance(seed, int):
            return None
        return failure["problem"], seed

    @property
    def problem(self) -> dict[str, Any]:
        """The timed problem as a dict; ValueError if the stored JSON is not an object."""
        return json_object(self.problem_json, "problem_json")

    @property
    def speedup_vs_default(self) -> float | None:
        """How many times faster than the space's default config, if that was timed."""
        return None if self.default_time_ms is None else self.default_time_ms / self.time_ms

    @property
    def speedup_vs_baseline(self) -> float | None:
        """How many times faster than the PyTorch baseline, if that was timed."""
        return None if self.baseline_time_ms is None else self.baseline_time_ms / self.time_ms


@dataclass(frozen=True, kw_only=True)
class TrialRow:
    """One trial of a search study: the config tried, its outcome and, when it ran, its time."""

    study: str
    kernel: str
    source_hash: str
    gpu: str
    dtype: str
    bucket: str
    number: int
    config_json: str
    outcome: str
    reason: str | None = None
    time_ms: float | None = None
    failing_example_json: str | None = None
    created_at: datetime = field(default_factory=now)
    id: int | None = None

    @property
    def config(self) -> dict[str, Any]:
        """The config as a dict; ValueError if the stored JSON is not an object."""
        return json_object(self.config_json, "config_json")


def driver_said(exc: DBAPIError) -> str:
    """What the driver said, on one line (drivers add hints on lines of their own)."""
    return " ".join(str(exc.orig).split())


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_time(value: Any, what: str) -> None:
    if value is not None and not (_is_number(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive finite number of milliseconds, got {value!r}")


def _check_aware(value: Any, what: str = "created_at") -> None:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {value!r}")


_TEXT_FIELDS = (
    "kernel",
    "source_hash",
    "gpu",
    "device_name",
    "dtype",
    "bucket",
    "config_json",
    "problem_json",
    "triton_version",
    "torch_version",
)


def check_types(row: BestRow) -> None:
    """ValueError unless each field of a stored row has its type: what a reader needs to use the row at all."""
    for name in _TEXT_FIELDS:
        if not isinstance(getattr(row, name), str):
            raise ValueError(f"{name} must be text, got {getattr(row, name)!r}")
    for name in ("time_ms", "default_time_ms", "baseline_time_ms"):
        value = getattr(row, name)
        if not (_is_number(value) or (value is None and name != "time_ms")):
            raise ValueError(f"{name} must be a number, got {value!r}")
    for name in ("examples_verified", "verify_seed", "verify_examples"):
        value = getattr(row, name)
        if not (_is_int(value) or (value is None and name != "examples_verified")):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    for name in ("timing", "verify_failure_json"):
        if getattr(row, name) is not None and not isinstance(getattr(row, name), str):
            raise ValueError(f"{name} must be text, got {getattr(row, name)!r}")
    _check_aware(row.created_at)
    if row.verified_at is not None:
        _check_aware(row.verified_at, "verified_at")


def check_best(row: BestRow) -> None:
    check_types(row)
    json_object(row.config_json, "config_json")
    json_object(row.problem_json, "problem_json")
    _check_time(row.time_ms, "time_ms")
    _check_time(row.default_time_ms, "default_time_ms")
    _check_time(row.baseline_time_ms, "baseline_time_ms")
    if row.timing is not None and row.timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS} or None, got {row.timing!r}")
    if row.examples_verified < 0:
        raise ValueError(f"examples_verified must be >= 0, got {row.examples_verified}")
    check_verification(
        row.verified_at, row.verify_seed, row.verify_examples, row.verify_passed, row.verify_failure_json
    )


def check_verification(
    at: datetime | None, seed: int | None, examples: int | None, passed: bool | None, failure_json: str | None
) -> None:
    given = [v is not None for v in (at, seed, examples, passed)]
    if any(given) and not all(given):
        raise ValueError("verified_at, verify_seed, verify_examples and verify_passed are given together or not at all")
    if at is not None:
        _check_aware(at, "verified_at")
    if examples is not None and examples < 0:
        raise ValueError(f"verify_examples must be >= 0, got {examples}")
    if failure_json is not None:
        if passed is not False:
            raise ValueError("verify_failure_json belongs to a failed verification (verify_passed=False)")
        json_object(failure_json, "verify_failure_json")


def check_trial(row: TrialRow) -> None:
    if row.outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {row.outcome!r}")
    json_object(row.config_json, "config_json")
    if row.failing_example_json is not None:
        _json(row.failing_example_json, "failing_example_json")
    _check_time(row.time_ms, "time_ms")
    _check_aware(row.created_at)


def row_values(row: BestRow | TrialRow) -> dict[str, Any]:
    # Model attributes carry the dataclass field names, so rows map across by name.
    return {f.name: getattr(row, f.name) for f in fields(row) if f.name != "id"}


BEST_FIELDS = tuple(f.name for f in fields(BestRow))
