"""Retune everything for new hardware in one command: every kernel's preset problems in every dtype on this GPU,
one study each, the time budget split across the studies still to run (each gets its share of what is left as
its search timeout). Resumable: a study whose row this GPU already holds for the kernel's current source (or an
earlier space it `extends`) in the database is skipped, so a second run continues where the first stopped."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import re
import time
from collections.abc import Callable, Sequence

import torch

from autotune import gpu
from autotune.db import ConfigStore
from autotune.engine.isolation import shared_workers
from autotune.engine.plan import SearchOptions, check_gpu
from autotune.engine.precompile import CompilePool
from autotune.engine.search import search
from autotune.space import Problem
from autotune.spec import DTYPE_NAMES, KernelSpec, shape_label

STORED, KEPT, NOT_FOUND, NOT_RUN, FAILED = "stored", "kept", "no verified config", "not run", "error"
"""A study's status: searched and stored; skipped, its row already in the database; searched, nothing passed;
not started (budget spent or interrupted); raised."""


@dataclasses.dataclass(frozen=True)
class Study:
    """One (kernel, dtype, bucket) to tune, on its preset problem."""

    spec: KernelSpec
    dtype: torch.dtype
    problem: Problem

    @property
    def bucket(self) -> str:
        return self.spec.bucket(self.spec.problem_for(self.problem, self.dtype))

    @property
    def label(self) -> str:
        return f"{self.spec.name} {DTYPE_NAMES[self.dtype]} {self.bucket}"


@dataclasses.dataclass
class Outcome:
    """What became of one study."""

    study: Study
    status: str
    detail: str = ""
    best_ms: float | None = None
    vs_default: float | None = None
    seconds: float = 0.0

    def row(self) -> dict:
        return {
            "kernel": self.study.spec.name,
            "dtype": DTYPE_NAMES[self.study.dtype],
            "shape": shape_label(self.study.problem),
            "bucket": self.study.bucket,
            "status": self.status,
            "best ms": self.best_ms,
            "vs default": self.vs_default,
            "seconds": round(self.seconds, 1),
            "detail": self.detail,
        }


@dataclasses.dataclass
class Report:
    """Every study's outcome, in order, the GPU, and whether the run was interrupted before its end."""

    gpu: str
    outcomes: list[Outcome]
    interrupted: bool = False

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


def parse_budget(text: str) -> float:
    """'2h', '20m', '90s', '1h30m' or plain seconds -> seconds; ValueError otherwise."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    else:
        parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", text)
        if not text or not parts:
            raise ValueError(f"budget {text!r}: expected a duration like 2h, 20m, 90s, 1h30m or seconds")
        h, m, s = (float(p or 0) for p in parts.groups())
        seconds = 3600 * h + 60 * m + s
    if seconds <= 0:
        raise ValueError(f"budget {text!r}: must be more than nothing")
    return seconds


def plan(specs: Sequence[KernelSpec], dtypes: Sequence[torch.dtype] = ()) -> list[Study]:
    """Each kernel's preset problems for this machine in each dtype it supports (of `dtypes`, if given), one
    study per bucket, taken in turns across the kernels (bf16, then fp16, then fp32 within each), so that a
    budget too small for everything still leaves rows for every kernel, in the dtypes most used first."""
    per_kernel, seen = [], set()
    for spec in specs:
        studies = []
        for dtype in sorted((d for d in spec.dtypes if not dtypes or d in dtypes), key=_dtype_rank):
            for problem in spec.presets_here():
                study = Study(spec, dtype, problem)
                if (spec.name, dtype, study.bucket) not in seen:
                    seen.add((spec.name, dtype, study.bucket))
                    studies.append(study)
        per_kernel.append(studies)
    return [s for turn in itertools.zip_longest(*per_kernel) for s in turn if s is not None]


def _dtype_rank(dtype: torch.dtype) -> int:
    order = (torch.bfloat16, torch.float16, torch.float32)
    return order.index(dtype) if dtype in order else len(order)


def stored(store: ConfigStore, study: Study, gpu_name: str) -> bool:
    """Whether the database holds this study's row for this GPU and the kernel's current source (not flagged),
    or a row of an earlier space the kernel `extends` that is current: the runtime serves it, so a retune
    leaves it (an `autotune search` of its bucket explores the added variant, its config the first trial)."""
    rows = store.best_rows(
        kernel=study.spec.name,
        gpu=gpu_name,
        dtype=DTYPE_NAMES[study.dtype],
        source_hash=study.spec.current_hashes,
        bucket=study.bucket,
    )
    return bool(study.spec.current_rows(r for r in rows if not r.flagged))


def retune(
    specs: Sequence[KernelSpec],
    *,
    budget_s: float,
    store: ConfigStore,
    options: SearchOptions = SearchOptions(trials=1000),
    dtypes: Sequence[torch.dtype] = (),
    compile_workers: int = 0,
    on_start: Callable[[Study, int, int], None] | None = None,
    on_done: Callable[[Outcome], None] | None = None,
) -> Report:
    """Search every study of `plan(specs, dtypes)` not yet stored, storing each winner in `store`, within
    `budget_s` seconds: each study's timeout is what is left of the budget over the studies left. `options`
    sets the rest of each search (its `timeout` is replaced). `on_start(study, i, total)` hears each study as it
    starts, `on_done` each outcome (skipped ones too). Interrupted (Ctrl-C), it stops and returns what it has,
    `interrupted` set; what was stored stays, and a second run goes on from there."""
    info = check_gpu(options.gpu_name, isolated=options.isolate is not False and not gpu.interpreter_active())
    studies = plan(specs, dtypes)
    pending = [s for s in studies if not stored(store, s, info.name)]
    report = Report(info.name, [])
    deadline = time.monotonic() + budget_s

    def finish(outcome: Outcome) -> None:
        report.outcomes.append(outcome)
        if on_done is not None:
            on_done(outcome)

    with contextlib.ExitStack() as stack:
        stack.enter_context(shared_workers())  # one evaluation worker handed from study to study
        pool = stack.enter_context(CompilePool(compile_workers)) if compile_workers > 1 else 0
        try:
            for i, study in enumerate(studies):
                if study not in pending:
                    finish(Outcome(study, KEPT, "already stored for this GPU and source (or a space it extends)"))
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    finish(Outcome(study, NOT_RUN, "budget spent"))
                    continue
                share = left / len(pending[pending.index(study) :])
                if on_start is not None:
                    on_start(study, i, len(studies))
                # A space smaller than the trials ends its study early; its time goes to the studies after it.
                trials = min(options.trials, study.spec.space.size())
                finish(_run(study, dataclasses.replace(options, timeout=share, trials=trials), store, pool))
        except KeyboardInterrupt:
            report.interrupted = True
            for study in studies[len(report.outcomes) :]:
                finish(Outcome(study, NOT_RUN, "interrupted"))
    return report


def _run(study: Study, options: SearchOptions, store: ConfigStore, pool: CompilePool | int) -> Outcome:
    started = time.monotonic()
    try:
        result = search(study.spec, study.problem, study.dtype, options, store=store, compile_workers=pool)
    except Exception as exc:  # one study's failure (a kernel that cannot run its preset here) ends only that study
        return Outcome(study, FAILED, f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - started)
    seconds = time.monotonic() - started
    if result.best_config is None:
        return Outcome(
            study, NOT_FOUND, " ".join(f"{k}:{v}" for k, v in sorted(result.counts().items())), seconds=seconds
        )
    return Outcome(
        study,
        STORED if result.stored else KEPT,
        f"{result.evaluations} evaluated",
        result.best_ms,
        result.speedup_vs_default,
        seconds,
    )
