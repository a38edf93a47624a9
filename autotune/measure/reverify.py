"""Re-verification of stored best configs: each row of one GPU checked again on a fresh seed, with more
Hypothesis problems than its search drew and its bucket's edge cases; the outcome is kept on the row,
and a row that fails is flagged, so the runtime no longer serves it. A row whose verification itself
raises is reported as an error and left as it was; the run goes on with the next row."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune import gpu, runtime
from autotune.db import BestRow, ConfigStore
from autotune.engine.precompile import CompilePool, default_workers, importable_name
from autotune.gate.verify import exception_summary, root_exception, verify
from autotune.runtime import registry
from autotune.spec import KernelSpec, dtype_from_name

DEFAULT_EXAMPLES = 200
"""Distinct Hypothesis problems per row by default (each one the row's config applies to); never fewer
than one more than the row's search verified."""


@dataclass(frozen=True)
class RowVerdict:
    """What re-verifying one stored row found."""

    kernel: str
    dtype: str
    bucket: str
    config_json: str
    result: str  # "pass", "FAIL", "error" (verification raised, not recorded) or "skipped" (`detail` says why)
    examples: int = 0  # distinct problems the config was checked on
    detail: str = ""  # the minimal failing problem and why it fails, what verification raised, or why skipped
    recorded: bool = False  # the outcome is kept on the row (False where the row changed meanwhile)
    compiled_ahead: bool = False  # its config was built for every problem by the compile pool before checking


@dataclass(frozen=True)
class Reverification:
    """The rows of one GPU re-verified on one seed."""

    gpu: str
    seed: int
    examples: int
    rows: list[RowVerdict]

    @property
    def failed(self) -> list[RowVerdict]:
        return [r for r in self.rows if r.result == "FAIL"]

    @property
    def errored(self) -> list[RowVerdict]:
        return [r for r in self.rows if r.result == "error"]


def fresh_seed() -> int:
    """A seed for a run that names none."""
    return secrets.randbelow(2**31)


def gpu_to_verify(gpu_name: str | None) -> gpu.GPUInfo:
    """This machine's GPU, which `gpu_name` (None: any) must name: verification runs the kernels here."""
    return gpu.require_gpu(gpu_name, "verification runs the kernels here: run it on that GPU")


def reverify_rows(
    store: ConfigStore,
    *,
    gpu_name: str | None = None,
    kernels: Sequence[KernelSpec] = (),
    examples: int | None = None,
    seed: int | None = None,
    on_row: Callable[[RowVerdict, int, int], None] | None = None,
    compile_workers: int | None = None,
    unverified_only: bool = False,
    flagged_only: bool = False,
) -> Reverification:
    """Re-verify the best rows of `gpu_name` in store (of `kernels` only, if given) and record each outcome
    as soon as it is known, in its own transaction: an interrupted run keeps what it finished.

    Args:
        gpu_name: must be this machine's GPU (None: whichever it is), since the kernels run here.
        examples: distinct Hypothesis problems per row (None: DEFAULT_EXAMPLES), raised to one more than the
            row's search verified.
        seed: None draws a fresh one; the seed used is returned and kept on every row.
        on_row: called with each verdict, the number of rows done and the number in all.
        compile_workers: processes that compile each row's config for all its problems before it is checked
            (None: as many as the search uses here; none under the interpreter).
        unverified_only: only the rows never re-verified (to finish a run that was cut short).
        flagged_only: only the rows whose latest re-verification failed (with unverified_only: either).
    A flagged row is checked on its recorded failing problem first, on the seed it failed on, so a fresh
    seed cannot clear it by drawing other inputs.
    """
    here = gpu_to_verify(gpu_name)
    examples = DEFAULT_EXAMPLES if examples is None else examples
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise ValueError(f"examples must be a positive int, got {examples!r}")
    workers = default_workers() if compile_workers is None else compile_workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"compile_workers must be an int >= 0, got {compile_workers!r}")
    seed = fresh_seed() if seed is None else seed
    given = {spec.name: spec for spec in kernels}

    def selected(row: BestRow) -> bool:
        if not (unverified_only or flagged_only):
            return True
        return (unverified_only and row.verified_at is None) or (flagged_only and row.flagged)

    rows = [r for r in store.best_rows(gpu=here.name) if (not given or r.kernel in given) and selected(r)]
    verdicts: list[RowVerdict] = []
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(CompilePool(workers)) if workers and rows else None
        for row in rows:
            verdicts.append(_reverify_row(store, row, given.get(row.kernel), examples, seed, pool))
            if on_row is not None:
                on_row(verdicts[-1], len(verdicts), len(rows))
    if any(v.result == "FAIL" and v.recorded for v in verdicts):
        runtime.clear_cache()  # this process stops serving the flagged rows too
    return Reverification(here.name, seed, examples, verdicts)


def _reverify_row(
    store: ConfigStore, row: BestRow, spec: KernelSpec | None, examples: int, seed: int, pool: CompilePool | None
) -> RowVerdict:
    def skipped(why: str) -> RowVerdict:
        return RowVerdict(row.kernel, row.dtype, row.bucket, row.config_json, "skipped", detail=why)

    if spec is None:
        # A row names a kernel by its registered name; its text is data: never imported as a module:attr path.
        if row.kernel not in registry.names():
            return skipped(f"kernel {row.kernel!r} is not registered (load it to check its rows: --kernel module:attr)")
        spec = registry.get(row.kernel)
    if not spec.row_is_current(row):
        return skipped(f"tuned for another source of {spec.name} ({row.source_hash}): the runtime ignores it")
    try:
        config = spec.space.validate(spec.current_config(row))
    except ValueError as exc:  # InvalidConfig, or JSON that is no object
        return skipped(f"config not in {spec.name}'s space (the runtime ignores it): {exc}")
    problem = row.problem
    edges = spec.edges_for(problem) if problem else []  # the problem it was timed on, and its bucket's edges
    known = [recorded] if (recorded := row.recorded_failure) else []
    dtype, asked = dtype_from_name(row.dtype), max(examples, row.examples_verified + 1)
    compiled = False
    try:
        if pool is not None and importable_name(spec) is not None:
            compiled = pool.compile_for_verify(
                spec, config, dtype, examples=asked, seed=seed, extra_problems=[*edges, *(p for p, _ in known)]
            )
        result = verify(
            spec,
            config,
            dtype,
            examples=asked,
            seed=seed,
            extra_problems=edges,
            extra_first=False,
            known_failures=known,
        )
    except Exception as exc:  # the gate itself broke (a spec's reference, torch, a lost CUDA context), not
        # shown to be the config's fault (a config's own errors are failures): leave the row as it was
        return RowVerdict(
            row.kernel,
            row.dtype,
            row.bucket,
            row.config_json,
            "error",
            detail=f"verification raised {exception_summary(exc)}{_raised_at(exc)}; not recorded",
        )
    failure_json, detail = None, ""
    if not result.passed:
        f = result.failure
        failure = (
            {"problem": f.problem, "kind": f.kind, "reason": f.reason, "seed": f.seed}
            if f
            else {"problem": None, "kind": "untested", "reason": "the config applies to none of the problems drawn"}
        )
        failure_json = json.dumps(failure, sort_keys=True)
        detail = f.describe() if f else failure["reason"]
    recorded = store.record_verification(
        row, passed=result.passed, seed=seed, examples=result.examples, failure_json=failure_json
    )
    if not recorded:
        detail = (detail + "; " if detail else "") + "not recorded: the row changed during verification"
    return RowVerdict(
        row.kernel,
        row.dtype,
        row.bucket,
        row.config_json,
        "pass" if result.passed else "FAIL",
        result.examples,
        detail,
        recorded,
        compiled,
    )


def _raised_at(exc: BaseException) -> str:
    """' (at file.py:line in function)': where exc (the first of a group) was raised, for a report of one line."""
    frames = traceback.extract_tb(root_exception(exc).__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"
