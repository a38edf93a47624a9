"""A trial's outcome, and how a study keeps it: set on the Optuna trial, read back in any process."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from autotune.identity import Outcome, config_key
from autotune.space import Config, Problem

FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


@dataclass(frozen=True)
class TrialOutcome:
    """What one trial's config did: ok with a time, or why not."""

    number: int
    config: Config
    outcome: Outcome
    reason: str | None = None
    time_ms: float | None = None
    example: Problem | None = None
    timing: str | None = None  # how time_ms was taken: one of autotune.db.store.TIMINGS


def record_outcome(trial: optuna.Trial, outcome: TrialOutcome, examples: int = 0) -> None:
    """Keep what a trial's config did (and how many problems it passed) in the study, where `outcome_of`
    reads it back in any process."""
    trial.set_user_attr("config", outcome.config)
    trial.set_user_attr("outcome", str(outcome.outcome))
    trial.set_user_attr("examples", examples)
    if outcome.timing:
        trial.set_user_attr("timing", outcome.timing)
    if outcome.reason:
        trial.set_user_attr("reason", outcome.reason)
    if outcome.example is not None:
        trial.set_user_attr("example", outcome.example)


def outcome_of(trial: optuna.trial.FrozenTrial) -> TrialOutcome | None:
    """The outcome `record_outcome` kept for a finished trial; None for a trial that never finished."""
    attrs = trial.user_attrs
    if trial.state not in FINISHED or "outcome" not in attrs:
        return None
    return TrialOutcome(trial.number, attrs["config"], Outcome(attrs["outcome"]), attrs.get("reason"), trial.value,
                        attrs.get("example"), attrs.get("timing"))


def finished_outcomes(study: optuna.Study) -> dict[str, tuple[TrialOutcome, int]]:
    """Each config evaluated in the study so far (by any worker), by its key: its outcome and how many
    problems it passed."""
    found: dict[str, tuple[TrialOutcome, int]] = {}
    for trial in study.get_trials(deepcopy=False, states=FINISHED):
        outcome = outcome_of(trial)
        if outcome is not None:
            found.setdefault(config_key(outcome.config), (outcome, trial.user_attrs.get("examples", 0)))
    return found


def evaluated(study: optuna.Study) -> int:
    """Distinct configs compiled and checked in the study (configs the constraints reject cost nothing)."""
    return sum(outcome.outcome != Outcome.INVALID for outcome, _ in finished_outcomes(study).values())
