"""The search: one Optuna study per (kernel, GPU, dtype, shape bucket); every trial verified before it is timed.

`search` runs the study loop (`autotune.engine.study`) in this process, with one evaluator: in a worker
process when isolated (`autotune.engine.isolation`), else here."""

from __future__ import annotations

import contextlib

import optuna
import torch

from autotune.db import ConfigStore
from autotune.engine import isolation
from autotune.engine.evaluate import Evaluator
from autotune.engine.plan import SearchOptions, check_request, check_store, create_study
from autotune.engine.precompile import CompilePool
from autotune.engine.result import SearchResult, conclude_study
from autotune.engine.study import run_trials
from autotune.gate.verify import VerifyResult
from autotune.space import Config, Problem
from autotune.spec import KernelSpec


def search(
    spec: KernelSpec,
    problem: Problem,
    dtype: torch.dtype,
    options: SearchOptions = SearchOptions(),
    *,
    store: ConfigStore | None = None,
    storage: optuna.storages.BaseStorage | str | None = None,
    compile_workers: int | CompilePool = 0,
) -> SearchResult:
    """Search one problem's bucket: warm start from the default and what the databases know, verify every
    trial before timing it, re-verify the winner with more examples, and store it (in `store`) with its
    evidence. The study lives in `storage` (default: memory).

    With `compile_workers` > 1 (or a CompilePool, shared by several searches) the sampler proposes that
    many configs at a time, and worker processes compile them in parallel before they are verified and
    timed one by one.

    Isolated (options.isolate; the default on a GPU, or whenever a trial_timeout is given), every config
    compiles, runs and is timed in a worker process: one that crashes it or runs past the trial timeout is
    recorded as crashed or timeout and the worker restarted; this process never creates a CUDA context."""
    isolate = isolation.use_isolation(options.isolate, options.trial_timeout, spec)
    check_store(store)
    problem = spec.problem_for(problem, dtype)
    info = check_request(spec, problem, dtype, options.gpu_name, isolated=isolate)
    study, plan = create_study(spec, problem, dtype, info, options, storage, store)
    if isolate:
        evaluator: Evaluator = isolation.IsolatedEvaluator(
            spec,
            problem,
            dtype,
            examples=plan.examples,
            seed=plan.seed,
            max_numel=plan.max_numel,
            trial_timeout=options.trial_timeout,
            known_failures=plan.failures(),
        )
    else:
        evaluator = Evaluator(
            spec,
            problem,
            dtype,
            examples=plan.examples,
            seed=plan.seed,
            max_numel=plan.max_numel,
            known_failures=plan.failures(),
        )
    with contextlib.ExitStack() as stack:
        stack.callback(evaluator.close)
        pool = (
            compile_workers
            if isinstance(compile_workers, CompilePool)
            else (
                stack.enter_context(CompilePool(compile_workers, timeout=options.trial_timeout))
                if compile_workers > 1
                else None
            )
        )
        run_trials(study, plan, evaluator, pool=pool, on_trial=options.on_trial)

        def final_check(config: Config) -> VerifyResult:
            if pool is not None:  # its final problems compiled ahead, across the pool
                pool.compile_for_verify(
                    spec,
                    config,
                    dtype,
                    examples=options.final_examples,
                    seed=plan.seed + 1,
                    max_numel=plan.max_numel,
                    extra_problems=evaluator.edges,
                )
            return evaluator.reverify(config, examples=options.final_examples, seed=plan.seed + 1)

        return conclude_study(
            study,
            plan,
            evaluator,
            info,
            store=store,
            final_examples=options.final_examples,
            reverify=final_check,
            on_final_check=options.on_final_check,
        )
