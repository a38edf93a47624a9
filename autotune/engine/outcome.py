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
    timing: str | None = None  # how time_ms was taken: one of autotune.db.rows.TIMINGS


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
    return TrialOutcome(
        trial.number,
        attrs["config"],
        Outcome(attrs["outcome"]),
        attrs.get("reason"),
        trial.value,
        attrs.get("example"),
        attrs.get("timing"),
    )


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


class TrialTally:
    """A study's trials counted as its budget counts them: distinct configs, each by the outcome it had. A
    config proposed again (a repeat: its first outcome reused, nothing run) and a config the space's
    constraints reject (never compiled) take no step of the budget."""

    def __init__(self) -> None:
        self.outcomes: dict[str, Outcome] = {}  # config key -> outcome of its first trial
        self.repeats = 0

    def add(self, outcome: TrialOutcome) -> bool:
        """Count one trial; True where it evaluated a config not tried before: one step of the budget."""
        key = config_key(outcome.config)
        if key in self.outcomes:
            self.repeats += 1
            return False
        self.outcomes[key] = outcome.outcome
        return outcome.outcome != Outcome.INVALID

    @property
    def evaluated(self) -> int:
        return sum(o != Outcome.INVALID for o in self.outcomes.values())

    @property
    def rejected(self) -> int:
        return sum(o == Outcome.INVALID for o in self.outcomes.values())

    def counts(self) -> dict[str, int]:
        """Distinct configs by outcome."""
        out: dict[str, int] = {}
        for o in self.outcomes.values():
            out[str(o)] = out.get(str(o), 0) + 1
        return out

    def uncounted(self) -> str:
        """The trials that took no step of the budget: 'not counted: 4 repeats, 1 rejected by the constraints'."""
        parts = [f"{self.repeats} repeat{'s' * (self.repeats != 1)}"] if self.repeats else []
        if self.rejected:
            parts.append(f"{self.rejected} rejected by the constraints")
        return "not counted: " + ", ".join(parts) if parts else ""

    def describe(self) -> str:
        """'invalid:1 ok:20 (+4 repeats)': distinct configs by outcome, and the repeats."""
        text = " ".join(f"{k}:{v}" for k, v in sorted(self.counts().items()))
        return text + (f" (+{self.repeats} repeat{'s' * (self.repeats != 1)})" if self.repeats else "")
