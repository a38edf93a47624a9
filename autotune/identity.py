"""The identities a stored result is known by, each written in one place: a config's key, a trial's outcome,
a study's name, and the key of a shipped row (`RowKey`: what a stored best depends on)."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def config_key(config: Mapping[str, Any]) -> str:
    """A config as one canonical string: equal configs give equal keys, in any process (JSON, keys sorted)."""
    return json.dumps(config, sort_keys=True)


class Outcome(str, enum.Enum):
    """What one trial's config did. A `str`, so rows and study attributes store the plain name."""

    OK = "ok"  # verified, then timed
    INVALID = "invalid"  # rejected by the space's constraints: never compiled
    COMPILE_ERROR = "compile_error"
    INCORRECT = "incorrect"  # failed the gate, with its minimal failing problem
    ERROR = "error"  # raised while running
    CRASHED = "crashed"  # killed its isolated worker
    TIMEOUT = "timeout"  # ran past the trial time limit in its isolated worker

    def __str__(self) -> str:
        return self.value


FAULTS = frozenset({Outcome.COMPILE_ERROR, Outcome.ERROR, Outcome.CRASHED, Outcome.TIMEOUT})
"""Outcomes that say nothing about the config's speed or correctness: a search prints each with its reason (a
config that is merely invalid or wrong is counted in the table; its failing problem is stored)."""
OUTCOMES = tuple(o.value for o in Outcome)
"""Every outcome's stored name, in the order tables show them."""


@dataclass(frozen=True)
class RowKey:
    """What a stored best config depends on: one row per key in a database.

    The Triton version is *not* part of the key: it is recorded beside each row as evidence. A config is
    plain data (block sizes, warps, stages); re-verification (`autotune db verify`) checks a row under the
    Triton installed, and a row from another version still serves as the nearest-known good config rather
    than falling back to the default. The kernel's source hash is in the key: an edited kernel is a new
    kernel, and its rows start afresh (its earlier winners are only warm starts)."""

    kernel: str
    source_hash: str
    gpu: str
    dtype: str
    bucket: str

    def study_name(self) -> str:
        """The Optuna study that searches this key (the source hash shortened to 8 characters)."""
        return f"{self.kernel}:{self.source_hash[:8]}:{self.gpu}:{self.dtype}:{self.bucket}"


def problem_key(problem: Mapping[str, Any]) -> str:
    """A problem as one canonical string, as `config_key` writes a config."""
    return json.dumps(problem, sort_keys=True)
