"""Routing policy: whether a supported call goes to the tuned kernels or stays on torch.

- "always": every supported call runs the kernels.
- "measured": a call runs them only where the stored rows of this GPU, dtype and bucket of the kernels it launches
  (the backward's too when autograd records) show them, summed, at least as fast as the torch work they replace
  (`evidence`); anywhere else torch runs it. Decided once per call shape (`decisions()` lists each once).

A module's call is routed once per call signature (`route`): its settings and what `support.signature` reads off its
tensors (shapes, strides, dtypes, devices, grad mode, autocast) key `CALLS`, so a repeated call costs that key, one
dict lookup and the torch call: the checks, the bucketing and the evidence run on the first call of a signature only.

Under torch.compile the decision is made while tracing, through `assume_constant_result`: its sizes are made
concrete with `operator.index`, which specializes the graph on them (one graph per shape, as static shapes have).
The compiled code does no routing of its own, so nothing is remembered there.
"""

from __future__ import annotations

import inspect
import operator
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

from autotune.nn import evidence, support, uses
from autotune.spec import DTYPE_NAMES, DTYPES

POLICIES = ("measured", "always")
MAX_SHAPES_REMEMBERED = 4096
"""Call shapes whose decisions are kept; past that they are forgotten (re-deciding reads no database: the rows are
kept per bucket)."""


def check_policy(policy: object) -> str:
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {list(POLICIES)}, got {policy!r}")
    return policy  # type: ignore[return-value]


@dataclass(frozen=True)
class Decision:
    """How one kind of call of one shape and dtype was routed under the "measured" policy, and the evidence."""

    kind: str
    dtype: str
    sizes: tuple
    judgement: evidence.Judgement

    @property
    def routed(self) -> bool:
        return self.judgement.at_least_as_fast

    @property
    def call(self) -> str:
        """The call's sizes and flags by name: 'm=4096, n=4096, grad=True'."""
        names = inspect.signature(uses.KINDS[self.kind]).parameters
        return ", ".join(f"{name}={value}" for name, value in zip(names, self.sizes))

    @property
    def why(self) -> str:
        return self.judgement.why


_ROUTES: dict[tuple, bool] = {}
CALLS: dict[tuple, bool | str] = {}
"""A call signature -> how such calls run: True the kernels, False torch (as the policy decided), a string torch
because the kernel does not take the call (why)."""
_DECISIONS: dict[tuple, Decision] = {}
_FALLBACKS: Counter[tuple[str, str]] = Counter()


def _measured(kind: str, dtype_name: str, *sizes) -> bool:
    key = (kind, dtype_name, *sizes)
    routed = _ROUTES.get(key)
    if routed is None:
        if len(_ROUTES) >= MAX_SHAPES_REMEMBERED:
            _ROUTES.clear()
            _DECISIONS.clear()
            CALLS.clear()
        judgement = evidence.judge(uses.KINDS[kind](*sizes), DTYPES[dtype_name])
        routed = _ROUTES[key] = judgement.at_least_as_fast
        _DECISIONS[key] = Decision(kind, dtype_name, tuple(sizes), judgement)
    return routed


_measured_while_tracing = torch.compiler.assume_constant_result(_measured)


def routed(policy: str, kind: str, dtype: torch.dtype, *sizes) -> bool:
    """Whether a supported call of `kind` (a name in `uses.KINDS`, with its sizes and flags) runs the kernels."""
    if policy == "always":
        return True
    if torch.compiler.is_compiling():
        concrete = [s if type(s) is bool or type(s) is str else operator.index(s) for s in sizes]
        return _measured_while_tracing(kind, DTYPE_NAMES[dtype], *concrete)
    return _measured(kind, DTYPE_NAMES[dtype], *sizes)


def route(settings: tuple, decide: Callable[..., bool | str], x: object, *others: object) -> bool | str:
    """How a call runs: True the kernels, False torch (as the policy decided), a string torch because the kernel
    does not take the call (why; counted in `fallbacks()`). settings: the call's kind (first) and the settings of
    the module its decision reads; x and others: its tensors (None: absent). `decide(settings, x, *others)` decides
    on the first call of a signature (`support.signature`), remembered in `CALLS`, and on every call without one."""
    key = support.signature(settings, x, *others)
    way = CALLS.get(key) if key is not None else None
    if way is None:
        way = decide(settings, x, *others)
        if key is not None:
            if len(CALLS) >= MAX_SHAPES_REMEMBERED:
                CALLS.clear()
            CALLS[key] = way
    if way is not True and way is not False:
        fell_back(settings[0], way)
    return way


def fell_back(kind: str, reason: str) -> None:
    """Count a call torch ran because the kernel does not take it (shown by `fallbacks()`)."""
    if not torch.compiler.is_compiling():
        _FALLBACKS[(kind, reason)] += 1


def decisions() -> list[Decision]:
    """Every "measured" decision made in this process (since the last `clear`), in the order made."""
    return list(_DECISIONS.values())


def fallbacks() -> dict[tuple[str, str], int]:
    """(kind, why the kernel does not take the call) -> how many calls torch ran for that reason."""
    return dict(_FALLBACKS)


def clear() -> None:
    """Forget decisions, counts and the evidence read: the next calls read the databases again."""
    _ROUTES.clear()
    CALLS.clear()
    _DECISIONS.clear()
    _FALLBACKS.clear()
    evidence.clear()
