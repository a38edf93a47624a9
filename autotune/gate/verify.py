"""The correctness gate: a config must match float64 on Hypothesis-drawn problems before it is timed.

The error budget is earned, not guessed: on every problem the candidate's error against float64 must be
within a small factor of PyTorch's own error in the same dtype, plus one storage ulp and a little fp32
compute slack, both at its worst element and normwise (a scale error spread over every element). Outputs
are poisoned with NaN before each run, so an unwritten element always fails.
A kernel whose outputs are long sums (a GEMM's) gives an error floor per element: where a sum cancels far
below the size of its terms, its rounding error is judged against that size, not against the leftover
(there two correct summation orders differ by any factor, and the worst such element would decide).
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import cachetools
import torch
from hypothesis import HealthCheck, Phase, find, reject, settings
from hypothesis.errors import NoSuchExample, Unsatisfiable
from hypothesis.strategies import SearchStrategy

from autotune import gpu
from autotune.gate.compare import Outputs, check_references, compare_outputs, fresh_outputs
from autotune.gate.repeatable_draws import without_local_constants
from autotune.identity import problem_key
from autotune.space import Config, Problem
from autotune.spec import DTYPE_NAMES, KernelSpec


def default_max_numel() -> int:
    """Largest problem verify draws by default: small under the interpreter, which is slow per element."""
    return (1 << 13) if gpu.interpreter_active() else (1 << 20)


KnownFailure = tuple[Problem, int]
"""A problem that failed the gate before, and the seed of the inputs it failed on."""


@dataclass(frozen=True)
class Failure:
    """Why a config failed on one problem."""

    problem: Problem
    kind: str  # "incorrect" or "error"
    reason: str
    error: float | None = None
    budget: float | None = None
    seed: int | None = None  # of the inputs it failed on

    def describe(self) -> str:
        where = problem_key(self.problem)
        return f"{self.kind} on {where}: {self.reason}"


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of verifying one config of one kernel in one dtype."""

    kernel: str
    dtype: str
    config: Config
    examples: int  # distinct problems checked (the config applies to each): Hypothesis draws and extra problems
    failure: Failure | None = None
    worst_error_ratio: float = 0.0  # max over problems of error / budget
    skipped: int = 0  # draws the config does not apply to (rejected by the space's constraints), drawn anew
    problems: list[Problem] = field(default_factory=list, repr=False)
    rejected_by: dict[str, int] = field(default_factory=dict)
    """Per constraint that rejected some draws (by the reason it gave first): how many it rejected."""

    @property
    def passed(self) -> bool:
        return self.failure is None and self.examples > 0

    def explain(self) -> str:
        """Why the config did not pass: its minimal failing problem, or, where it applies to none of the problems
        drawn, the constraints that rejected them (most frequent first); '' when it passed."""
        if self.failure is not None:
            return self.failure.describe()
        if self.examples > 0:
            return ""
        if not self.rejected_by:
            return "no problem was drawn"
        drawn = f"applies to none of the {self.skipped} problems drawn: the space's constraints reject it"
        always = [reason for reason, count in self.rejected_by.items() if count == self.skipped]
        if always:
            return f"{drawn} on every one: {'; '.join(always)}"
        reasons = sorted(self.rejected_by.items(), key=lambda item: -item[1])
        shown = "; ".join(f"{reason} (on {count})" for reason, count in reasons[:3])
        return f"{drawn}: {shown}" + (f"; {len(reasons) - 3} more constraint(s)" if len(reasons) > 3 else "")


MAX_CACHED_BYTES = 8 << 30
"""What a ReferenceCache holds at most, in tensor bytes: a run verifying a large bucket's edge problems (float64
references of 16k x 16k products) would otherwise fill the GPU."""


def tensor_bytes(obj: object) -> int:
    """Bytes of the tensors in obj: a tensor, or dicts, tuples and lists of them (anything else counts 0)."""
    if isinstance(obj, torch.Tensor):
        return obj.untyped_storage().nbytes()
    if isinstance(obj, dict):
        obj = obj.values()
    elif not isinstance(obj, (tuple, list)):
        return 0
    return sum(tensor_bytes(o) for o in obj)


class ReferenceCache:
    """Inputs, PyTorch and float64 results (and error floors) per problem, shared by the configs checked on
    them: the most recently used, up to `max_bytes` of tensors (a larger problem's are not kept)."""

    def __init__(self, max_bytes: int = MAX_CACHED_BYTES) -> None:
        self._items = cachetools.LRUCache(max_bytes, getsizeof=tensor_bytes)

    @property
    def held_bytes(self) -> int:
        return int(self._items.currsize)

    def __len__(self) -> int:
        return len(self._items)

    def _item(self, spec: KernelSpec, problem: Problem, dtype: torch.dtype, seed: int):
        key = (spec.name, problem_key(problem), dtype, seed)
        item = self._items.get(key)
        if item is None:
            inputs = spec.make_inputs(problem, dtype, gpu.device(), seed)
            floor = spec.error_floor(inputs) if spec.error_floor else None
            base, ref = spec.baseline(inputs), spec.reference(inputs)
            check_references(spec, problem, base, ref)
            item = (inputs, base, ref, floor)
            with contextlib.suppress(ValueError):  # larger than the whole cache: used once, not kept
                self._items[key] = item
        return item

    def get(self, spec: KernelSpec, problem: Problem, dtype: torch.dtype, seed: int) -> tuple[dict, Outputs, Outputs]:
        return self._item(spec, problem, dtype, seed)[:3]

    def floor(self, spec: KernelSpec, problem: Problem, dtype: torch.dtype, seed: int) -> Outputs | None:
        """The spec's error floor for the problem's outputs, or None."""
        return self._item(spec, problem, dtype, seed)[3]


_gate_launches = 0


def gate_running() -> bool:
    """Whether the gate is launching a candidate now: a launcher that allocates its own outputs poisons its
    scratch memory then (`autotune.userkernel`), and only then."""
    return _gate_launches > 0


def check_problem(
    spec: KernelSpec,
    config: Config,
    problem: Problem,
    dtype: torch.dtype,
    *,
    seed: int = 0,
    cache: ReferenceCache | None = None,
) -> Failure | None:
    """Run config on one problem with poisoned output; None when it matches float64 within budget."""
    device = gpu.device()
    cache = cache or ReferenceCache()
    inputs, base, ref = cache.get(spec, problem, dtype, seed)
    out = fresh_outputs(spec, inputs, base)
    global _gate_launches
    _gate_launches += 1
    try:
        spec.launch(inputs, config, out)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as exc:  # a candidate may fail in any way; the trial records how
        return Failure(problem, "error", exception_summary(exc), seed=seed)
    finally:
        _gate_launches -= 1
    err, budget, reason = compare_outputs(out, ref, base, cache.floor(spec, problem, dtype, seed))
    if reason:
        return Failure(problem, "incorrect", reason, err, budget, seed)
    return None


NO_EXPLAIN = tuple(p for p in Phase if p is not Phase.explain)
"""Hypothesis's phases but the explain phase: it traces every line of each call made while shrinking
(a failure's minimal problem is all verify reports), which slows shrinking a launcher several times."""
SHRINK_SECONDS = 30.0
"""How long verify shrinks a failure by running new problems; past it, only problems already run can fail,
so Hypothesis ends on the smallest of those. On a GPU every new shape, head dim or layout compiles anew
(seconds each for an attention backward), and Hypothesis's own cap is minutes."""
HYPOTHESIS_RUNS = 4
"""Hypothesis runs per verify at most. One run draws `examples` problems the config applies to, some of
them more than once (choices a problem does not use still vary); each further run, on its own seed, draws
as many more as the last run needed per new problem for those still missing, until one adds none."""


OnCheck = Callable[[Problem, Failure | None], None]
"""Hears each distinct problem a config was checked on, as its check ends: the problem, and its failure or None."""


class _Checks:
    """The problems one config was checked on, each once, and the draws it does not apply to."""

    def __init__(
        self,
        spec: KernelSpec,
        config: Config,
        dtype: torch.dtype,
        seed: int,
        cache: ReferenceCache,
        shrink_seconds: float = SHRINK_SECONDS,
        on_check: OnCheck | None = None,
    ):
        self.spec, self.config, self.dtype, self.seed, self.cache = spec, config, dtype, seed, cache
        self.shrink_seconds = shrink_seconds
        self.on_check = on_check
        self.shrink_until: float | None = None  # set by the first failure
        self.problems: dict[str, Problem] = {}
        self.failed: dict[str, bool] = {}
        self.drawn: set[str] = set()
        self.draws = 0  # draws the config applies to, repeats included
        self.skipped = 0
        self.rejected: Counter[int] = Counter()  # draws each constraint (by index) rejected
        self.first_reason: dict[int, str] = {}

    def applies(self, problem: Problem) -> bool:
        objections = self.spec.space.objections(self.config, problem)
        if objections:
            self.skipped += 1
            self.rejected.update(objections.keys())
            for i, reason in objections.items():
                self.first_reason.setdefault(i, reason)
            return False
        return True

    def rejected_by(self) -> dict[str, int]:
        return {self.first_reason[i]: count for i, count in self.rejected.items()}

    def heard(self, problem: Problem, failure: Failure | None) -> Failure | None:
        if self.on_check is not None:
            self.on_check(problem, failure)
        return failure

    def check(self, problem: Problem) -> Failure | None:
        key = problem_key(problem)
        self.problems[key] = problem
        failure = self._outcome(problem)
        self.failed[key] = failure is not None
        return self.heard(problem, failure)

    def _outcome(self, problem: Problem) -> Failure | None:
        return check_problem(self.spec, self.config, problem, self.dtype, seed=self.seed, cache=self.cache)

    def drawn_fails(self, problem: Problem) -> bool:
        """Hypothesis's condition: whether a drawn problem fails; a draw the config does not apply to is
        rejected (no example: Hypothesis counts only the others), and a repeat is not run again."""
        problem = self.spec.problem_for(problem, self.dtype)
        if not self.applies(problem):
            reject()
        key = problem_key(problem)
        self.drawn.add(key)
        self.draws += 1
        if key not in self.failed:
            if self.shrink_until is not None and time.monotonic() > self.shrink_until:
                return False  # past the shrink budget: not run, so not known to fail
            if self.check(problem) and self.shrink_until is None:
                self.shrink_until = time.monotonic() + self.shrink_seconds
        return self.failed[key]


class _Draws(_Checks):
    """_Checks that launch nothing: every problem passes, so Hypothesis draws what a passing verify draws."""

    def _outcome(self, problem: Problem) -> Failure | None:
        return None


def draw_problems(
    spec: KernelSpec,
    config: Config,
    dtype: torch.dtype,
    *,
    examples: int = 50,
    seed: int | None = None,
    max_numel: int | None = None,
) -> list[Problem]:
    """The problems `verify` draws for config with these arguments when none fails (the same seed draws
    the same), without running anything: what to compile ahead before verifying."""
    config = spec.space.validate(config)
    draws = _Draws(spec, config, dtype, seed or 0, ReferenceCache())
    _minimal_failing(draws, spec.problems_fitting(config, dtype, max_numel or default_max_numel()), examples, seed)
    return list(draws.problems.values())


def _minimal_failing(checks: _Checks, strategy: SearchStrategy, examples: int, seed: int | None) -> Problem | None:
    """The shrunk failing problem of the first Hypothesis run that finds one, or None when `examples`
    distinct problems were drawn (or no more could be) and none failed."""
    if examples <= 0:
        return None
    asked = examples
    for run in range(HYPOTHESIS_RUNS):
        before, draws_before = len(checks.drawn), checks.draws
        hyp_settings = settings(
            max_examples=asked, database=None, deadline=None, suppress_health_check=list(HealthCheck), phases=NO_EXPLAIN
        )
        rng = random.Random(seed if seed is not None else 0) if run == 0 else random.Random(f"{seed}/{run}")
        try:
            with without_local_constants():  # else the draws depend on what this process has imported
                return find(strategy, checks.drawn_fails, settings=hyp_settings, random=rng)
        except (NoSuchExample, Unsatisfiable):  # Unsatisfiable: the config applies to none of the draws
            pass
        new, missing = len(checks.drawn) - before, examples - len(checks.drawn)
        if missing <= 0 or new == 0:
            return None
        asked = math.ceil(missing * (checks.draws - draws_before) / new)
    return None


def verify(
    spec: KernelSpec,
    config: Config,
    dtype: torch.dtype,
    *,
    examples: int = 50,
    seed: int | None = None,
    max_numel: int | None = None,
    extra_problems: Sequence[Problem] = (),
    cache: ReferenceCache | None = None,
    extra_first: bool = True,
    shrink_seconds: float = SHRINK_SECONDS,
    known_failures: Sequence[KnownFailure] = (),
    on_check: OnCheck | None = None,
) -> VerifyResult:
    """Check config on `extra_problems`, then on `examples` distinct Hypothesis problems (0: none); shrink a failure.
    With `extra_first=False` the Hypothesis problems come first, so that a failure found among them is
    reported shrunk, not as the extra problem (often a large one) that fails too. Shrinking runs new
    problems for `shrink_seconds` after the first failure, then settles on the smallest failure it ran.

    A config is only checked on problems its space's constraints let it run on: a draw they reject is
    no example (Hypothesis draws another), and a problem drawn again is not checked again, so `examples`
    counts problems checked. Where fewer than about 1% of draws apply, Hypothesis stops with fewer.

    `known_failures` (problems that failed before, each with the seed of the inputs it failed on) are
    checked first, each on its own seed: a failure that depends on the inputs is found again.

    `on_check` hears each distinct problem as its check ends (those Hypothesis runs while shrinking a failure
    included): a caller's progress.
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ValueError(f"examples must be an integer >= 0 (0: the extra and known problems only), got {examples!r}")
    config = spec.space.validate(config)
    checks = _Checks(spec, config, dtype, seed or 0, cache or ReferenceCache(), shrink_seconds, on_check)

    def result(failure: Failure | None) -> VerifyResult:
        return VerifyResult(
            spec.name,
            DTYPE_NAMES[dtype],
            config,
            len(checks.problems),
            failure,
            skipped=checks.skipped,
            problems=list(checks.problems.values()),
            rejected_by=checks.rejected_by(),
        )

    for problem, problem_seed in known_failures:
        problem = spec.problem_for(problem, dtype)
        if checks.applies(problem):
            checks.problems[problem_key(problem)] = problem
            failure = check_problem(spec, config, problem, dtype, seed=problem_seed, cache=checks.cache)
            if checks.heard(problem, failure):
                return result(failure)

    def first_extra_failure() -> VerifyResult | None:
        for problem in extra_problems:
            problem = spec.problem_for(problem, dtype)
            if checks.applies(problem) and (failure := checks.check(problem)):
                return result(failure)
        return None

    if extra_first and (failed := first_extra_failure()):
        return failed
    minimal = _minimal_failing(
        checks, spec.problems_fitting(config, dtype, max_numel or default_max_numel()), examples, seed
    )
    if minimal is None:
        return (not extra_first and first_extra_failure()) or result(None)
    failure = check_problem(spec, config, spec.problem_for(minimal, dtype), dtype, seed=seed or 0, cache=checks.cache)
    if failure is None:  # flaky: failed during the search, passes on replay (a race or reading unset memory)
        failure = Failure(
            minimal, "incorrect", "failed once, passed on replay: nondeterministic result", seed=seed or 0
        )
    return result(failure)


def exception_summary(exc: BaseException) -> str:
    """'TypeName: first line of the message', as a failure records an exception; for a group of exceptions
    (Hypothesis's FlakyFailure: a check raised once, then passed on replay), what its first one said too."""
    summary = f"{type(exc).__name__}: {_first_line(exc)}"
    inner = root_exception(exc)
    return summary if inner is exc else f"{summary} (first: {type(inner).__name__}: {_first_line(inner)})"


def root_exception(exc: BaseException) -> BaseException:
    """The first exception inside exc where exc groups several (Hypothesis's FlakyFailure), else exc itself."""
    inner = getattr(exc, "exceptions", None)  # an exception group (Python 3.11's, or the exceptiongroup backport)
    while isinstance(inner, (list, tuple)) and inner and isinstance(inner[0], BaseException):
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""
