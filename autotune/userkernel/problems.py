"""The problems of a tuned launcher: its size symbols drawn by Hypothesis (1, primes, powers of two and their
neighbours, each range's ends; 0 where a range starts there), value magnitudes, drawn scalar arguments; the
inputs built from a problem, its bucket, `--shape name=value,...`, and the preset problems a search tunes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from autotune.gate.strategies import magnitudes, sizes_between
from autotune.space import Problem, next_pow2
from autotune.spec import Cost, Inputs
from autotune.userkernel.arguments import Arguments

DEFAULT_MOST = 1 << 24
"""A symbol's largest size where `sizes=` does not say (the gate's element budget caps it further)."""
GPU_PRESET_ELEMENTS = 1 << 24
INTERPRETER_PRESET_ELEMENTS = 1 << 12
"""Elements of the default preset problem (all symbols together): a search tunes it where no shape is given."""

SizeRule = int | tuple[int, int] | SearchStrategy


def _rules(kernel: str, symbols: Sequence[str], sizes: Mapping[str, Any] | None) -> dict[str, SizeRule]:
    sizes = dict(sizes or {})
    unknown = sorted(set(sizes) - set(symbols))
    if unknown:
        raise ValueError(f"{kernel}: sizes= names {unknown}, not among the tensors' symbols {list(symbols)}")
    rules: dict[str, SizeRule] = {}
    for s in symbols:
        rule = sizes.get(s, (1, DEFAULT_MOST))
        if isinstance(rule, SearchStrategy) or (isinstance(rule, int) and not isinstance(rule, bool) and rule >= 0):
            rules[s] = rule
        elif (
            isinstance(rule, tuple)
            and len(rule) == 2
            and all(isinstance(v, int) for v in rule)
            and 0 <= rule[0] <= rule[1]
        ):
            rules[s] = rule
        else:
            raise ValueError(
                f"{kernel}: sizes[{s!r}] must be a size, a (lo, hi) range with 0 <= lo <= hi, or a "
                f"Hypothesis strategy; got {rule!r}"
            )
    return rules


@dataclass(frozen=True)
class ProblemSpace:
    """What the gate draws for one tuned launcher, and how a problem becomes inputs and a bucket."""

    kernel: str
    arguments: Arguments
    rules: dict[str, SizeRule]
    key: tuple[str, ...]
    custom: SearchStrategy | None = None

    @classmethod
    def build(
        cls,
        arguments: Arguments,
        *,
        sizes: Mapping[str, Any] | None,
        key: Sequence[str] | None,
        problems: SearchStrategy | None,
    ) -> ProblemSpace:
        kernel, symbols = arguments.kernel, arguments.symbols
        key = tuple(symbols if key is None else ([key] if isinstance(key, str) else key))
        unknown = [k for k in key if k not in symbols]
        if unknown:
            raise ValueError(f"{kernel}: key= names {unknown}, not among the tensors' symbols {list(symbols)}")
        if problems is not None and not isinstance(problems, SearchStrategy):
            raise TypeError(
                f"{kernel}: problems= must be a Hypothesis strategy of dicts of sizes, got {type(problems).__name__}"
            )
        return cls(kernel, arguments, _rules(kernel, symbols, sizes), key, problems)

    def strategy(self, max_numel: int) -> SearchStrategy[Problem]:
        """Problems with at most about max_numel elements in all symbols together (where the ranges allow)."""
        if self.custom is not None:
            return self.custom.map(self._complete)

        @st.composite
        def draw(d: st.DrawFn) -> Problem:
            budget, sizes = max_numel, {}
            for s, rule in self.rules.items():
                if isinstance(rule, SearchStrategy):
                    size = d(rule)
                elif isinstance(rule, int):
                    size = rule
                else:
                    lo, hi = rule
                    size = d(sizes_between(lo, max(lo, min(hi, budget))))
                sizes[s] = size
                budget = max(1, budget // max(1, size))
            problem = {"sizes": sizes, "magnitude": d(magnitudes())}
            if self.arguments.drawn:
                problem["args"] = {n: d(s) for n, s in self.arguments.drawn.items()}
            return problem

        return draw()

    def _complete(self, drawn: Any) -> Problem:
        """A problem of `problems=`: every symbol given (fixed sizes filled in), magnitude 1 unless drawn."""
        if not isinstance(drawn, Mapping):
            raise TypeError(f"{self.kernel}: problems= drew {drawn!r}; expected a dict of symbol sizes")
        drawn = dict(drawn)
        magnitude = drawn.pop("magnitude", 1.0)
        sizes = {s: rule for s, rule in self.rules.items() if isinstance(rule, int)} | drawn
        unknown, missing = sorted(set(sizes) - set(self.rules)), [s for s in self.rules if s not in sizes]
        if unknown or missing:
            raise ValueError(
                f"{self.kernel}: problems= drew {drawn}; expected the sizes of {list(self.rules)} "
                "(and optionally a magnitude)"
            )
        return {"sizes": sizes, "magnitude": magnitude}

    def inputs(self, problem: Problem, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
        """The launcher's keyword arguments for a problem: random tensors of its sizes (normal, times its
        magnitude) in dtype, the drawn scalars and the fixed values."""
        gen = torch.Generator().manual_seed(seed)
        magnitude = problem.get("magnitude", 1.0)
        inputs: Inputs = {}
        for name, decl in self.arguments.tensors.items():
            values = torch.randn(decl.shape(problem["sizes"]), generator=gen, dtype=torch.float64) * magnitude
            inputs[name] = values.to(device=device, dtype=dtype)
        return {**inputs, **problem.get("args", {}), **self.arguments.fixed}

    def bucket(self, problem: Problem) -> str:
        """The key symbols' sizes rounded up to powers of two: 'n=8192' or 'm=64,n=1024'."""
        return ",".join(f"{s}={next_pow2(problem['sizes'][s])}" for s in self.key) or "all"

    def problem_of(self, sizes: Mapping[str, int]) -> Problem:
        """The problem of a call with these symbol sizes (what the runtime's constraints see):
        {"sizes": {symbol: size}, "magnitude": 1.0}; drawn problems add {"args": {name: value}}."""
        return {"sizes": dict(sizes), "magnitude": 1.0}

    def parse_shape(self, text: str) -> Problem:
        """`--shape n=5000` or `m=64,n=100` -> a problem; a symbol with a fixed size may be left out."""
        given: dict[str, int] = {}
        for part in (p for p in text.split(",") if p.strip()):
            name, sep, value = (x.strip() for x in part.partition("="))
            if not sep or name not in self.rules:
                raise ValueError(
                    f"shape {text!r}: expected name=value pairs for {list(self.rules)}, separated by commas"
                )
            try:
                given[name] = int(value)
            except ValueError:
                raise ValueError(f"shape {text!r}: {name}={value!r} is not a whole number") from None
            if given[name] < 0:
                raise ValueError(f"shape {text!r}: {name} must be >= 0")
        problem = {s: rule for s, rule in self.rules.items() if isinstance(rule, int)} | given
        missing = [s for s in self.rules if s not in problem]
        if missing:
            raise ValueError(f"shape {text!r}: give {', '.join(f'{s}=...' for s in missing)} too")
        return self.problem_of(problem)

    def presets(self, elements: int) -> list[Problem]:
        """One problem of about `elements` elements over all symbols together, each symbol alike (within its range)."""
        share = max(1, round(elements ** (1 / max(1, len(self.rules)))))
        sizes = {}
        for s, rule in self.rules.items():
            if isinstance(rule, int):
                sizes[s] = rule
            elif isinstance(rule, tuple):
                sizes[s] = min(max(share, rule[0]), rule[1])
            else:
                return []  # a strategy-sized symbol has no natural preset: give presets= or --shape
        return [self.problem_of(sizes)]

    def cost(self, problem: Problem, dtype: torch.dtype, outputs: Sequence[list[int]]) -> Cost:
        """Bytes: every tensor argument and output once; FLOPs: one per element of the largest output."""
        numels = [math.prod(t.shape(problem["sizes"])) for t in self.arguments.tensors.values()]
        out = [math.prod(s) for s in outputs]
        return Cost(flops=max(out or numels), bytes=(sum(numels) + sum(out)) * dtype.itemsize)
