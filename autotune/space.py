"""Search spaces: typed discrete parameters, constraints checked before compiling, a safe default."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Config = dict[str, Any]
Problem = dict[str, Any]
Constraint = Callable[[Config, Problem], "str | None"]
"""Returns why a config cannot run on a problem, or None when it can."""
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
"""Config entries that are Triton launch options, not kernel arguments (`triton.Config`'s keywords)."""


class InvalidConfig(ValueError):
    """A config does not belong to a search space (unknown key, missing key, value out of range)."""


@dataclass(frozen=True)
class Param:
    """One searched parameter with its allowed values, in search order."""

    name: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"parameter {self.name!r} needs at least one value")


def within(config: Mapping[str, Any], params: Mapping[str, Sequence[Any]]) -> bool:
    """Whether config sets exactly the parameters of params, each to one of its values."""
    return set(config) == set(params) and all(_one_of(config[name], values) for name, values in params.items())


def _one_of(value: Any, values: Sequence[Any]) -> bool:
    # bool is an int subclass; never let True stand in for 1, nor 1 for True.
    return any(v == value and isinstance(v, bool) == isinstance(value, bool) for v in values)


def powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    """All powers of two from lo to hi inclusive."""
    return tuple(2**e for e in range(int(math.log2(lo)), int(math.log2(hi)) + 1))


@dataclass(frozen=True)
class SearchSpace:
    """The parameters of a kernel, the constraints between them and a problem, and the default.

    The default must satisfy every constraint on every problem: the runtime falls back to it.
    """

    params: tuple[Param, ...]
    default: Mapping[str, Any]
    constraints: tuple[Constraint, ...] = ()
    suggest_fn: Callable[[Any, Problem], Config] | None = None
    """Optional define-by-run sampling (Optuna conditional parameters): draws only the parameters a
    branch uses and derives the rest from the problem, so the sampler wastes no trials on configs the
    constraints reject. Must use the parameter names and values of `params`."""
    starts_fn: Callable[[Problem], Sequence[Mapping[str, Any]]] | None = None
    """Optional configs known to do well on problems like this one (measured on some GPU, say which in the
    function's docstring): every study of such a problem tries them first, after its bucket's stored rows,
    and measures them like any trial. Each is kept only where it is valid and the problem accepts it."""
    _by_name: dict[str, Param] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {p.name: p for p in self.params})
        self.validate(self.default)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def validate(self, config: Mapping[str, Any]) -> Config:
        """Return config as a plain dict if it belongs to this space, else raise InvalidConfig."""
        if not isinstance(config, Mapping):
            raise InvalidConfig(f"config must be a mapping of parameter to value, got {type(config).__name__}")
        unknown = sorted(set(config) - set(self._by_name))
        if unknown:
            raise InvalidConfig(f"unknown parameter(s) {unknown}; expected {list(self.names)}")
        missing = [n for n in self.names if n not in config]
        if missing:
            raise InvalidConfig(f"missing parameter(s) {missing}")
        for p in self.params:
            value = config[p.name]
            if not _one_of(value, p.values):
                raise InvalidConfig(f"{p.name}={value!r} is not one of {list(p.values)}")
        return {n: config[n] for n in self.names}

    def config_from_json(self, text: str) -> Config:
        """A config written as a JSON object of parameter values, those left out taken from the default;
        InvalidConfig saying what was expected where text is not such an object or its values are not in the space."""
        first = self.params[0].name
        expected = f"a JSON object of parameter values like '{json.dumps({first: self.default[first]})}'"
        try:
            given = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidConfig(
                f"expected {expected}, got {text!r}, which is not JSON ({exc.msg} at character {exc.pos})"
            ) from None
        if not isinstance(given, dict):
            raise InvalidConfig(f"expected {expected}, got {text!r}")
        return self.validate({**self.default, **given})

    def rejects(self, config: Config, problem: Problem) -> str | None:
        """Why this (valid) config cannot run on problem, or None if it can."""
        for constraint in self.constraints:
            reason = constraint(config, problem)
            if reason:
                return reason
        return None

    def objections(self, config: Config, problem: Problem) -> dict[int, str]:
        """Every constraint's reason not to run this (valid) config on problem, by the constraint's index:
        `rejects` stops at the first; this says which constraints a config could never get past."""
        found: dict[int, str] = {}
        for i, constraint in enumerate(self.constraints):
            try:
                reason = constraint(config, problem)
            except Exception:
                if not found:
                    raise
                continue  # past a rejection a constraint may meet what the earlier ones rule out: not its verdict
            if reason:
                found[i] = reason
        return found

    def with_overrides(self, **overrides: Any) -> Config:
        """The default config with some parameters changed (validated)."""
        return self.validate({**self.default, **overrides})

    def grid(self) -> Iterator[Config]:
        """Every point of the space, constraints not applied."""
        for values in itertools.product(*(p.values for p in self.params)):
            yield dict(zip(self.names, values))

    def grid_for(self, problem: Problem) -> list[Config]:
        """Every point that can run on problem."""
        return [c for c in self.grid() if self.rejects(c, problem) is None]

    def size(self) -> int:
        return math.prod(len(p.values) for p in self.params)

    def starts(self, problem: Problem) -> list[Config]:
        """The configs `starts_fn` offers for problem that belong to the space and that the problem accepts."""
        if self.starts_fn is None:
            return []
        configs = []
        for config in self.starts_fn(problem):
            try:
                valid = self.validate(config)
            except InvalidConfig:
                continue
            if self.rejects(valid, problem) is None and valid not in configs:
                configs.append(valid)
        return configs

    def suggest(self, trial: Any, problem: Problem | None = None) -> Config:
        """Draw a config from an Optuna trial: the space's own sampling if it has one, else one
        categorical per parameter."""
        if self.suggest_fn is not None and problem is not None:
            return self.validate(self.suggest_fn(trial, problem))
        return {p.name: trial.suggest_categorical(p.name, list(p.values)) for p in self.params}


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
