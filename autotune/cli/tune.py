"""Commands that tune: verify, search (one process or shared studies), worker, retune."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time

import click

import autotune
from autotune import gpu
from autotune.cli.app import FORMATS, config_option, dtypes_of, emit, kernel_spec, main, open_store
from autotune.identity import FAULTS
from autotune.runtime import registry
from autotune.spec import DTYPE_NAMES, shape_label


@main.command()
@click.argument("kernel")
@click.option("--config", "config_json", help="Config as JSON; parameters left out take the default's values.")
@click.option(
    "--dtype", "dtypes", multiple=True, help="fp32, fp16 or bf16 (repeatable; default: all the kernel supports)."
)
@click.option(
    "--examples",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Distinct Hypothesis problems per dtype that the config applies to.",
)
@click.option("--seed", default=0, show_default=True)
def verify(kernel: str, config_json: str | None, dtypes: tuple[str, ...], examples: int, seed: int) -> None:
    """Check a config against float64 on Hypothesis-drawn problems; exit 1 on any failure."""
    from tqdm import tqdm

    from autotune.gate.verify import verify as run_verify

    spec = kernel_spec(kernel)
    config = config_option(spec, config_json or "{}", "--config")
    rows, failed = [], False
    for dtype in dtypes_of(dtypes, spec):
        label, started = f"{spec.name} {DTYPE_NAMES[dtype]}", time.monotonic()
        with tqdm(total=examples, desc=label, unit="problem", file=sys.stderr, leave=False) as bar:
            failed_once = []

            def checked(problem, failure) -> None:
                if failure:
                    failed_once.append(True)
                bar.total = max(bar.total, bar.n + 1)  # shrinking a failure runs problems past those asked
                bar.set_postfix_str(
                    ("shrinking a failure: " if failed_once else "") + shape_label(problem), refresh=False
                )
                bar.update(1)
                bar.refresh()  # each problem drawn: checks are slow enough, and the count is what a user waits on

            result = run_verify(spec, config, dtype, examples=examples, seed=seed, on_check=checked)
        click.echo(
            f"{label}: {'pass' if result.passed else 'FAIL'}, {result.examples} problems checked "
            f"in {time.monotonic() - started:.1f} s",
            err=True,
        )
        failed |= not result.passed
        rows.append(
            {
                "kernel": spec.name,
                "dtype": DTYPE_NAMES[dtype],
                "config": json.dumps(config),
                "examples": result.examples,
                "skipped": result.skipped,
                "result": "pass" if result.passed else "FAIL",
                "minimal failing problem": result.explain(),
            }
        )
    emit(rows, "table")
    if failed:
        sys.exit(1)


@main.command()
@click.argument("kernel")
@click.option("--gpu", "gpu_name", default="auto", show_default=True, help="GPU to tune for; must be this machine's.")
@click.option("--dtype", "dtypes", multiple=True, help="Repeatable; default: all the kernel supports.")
@click.option("--shape", "shapes", multiple=True, help="Problem shape like 4096x8192 (repeatable; default: presets).")
@click.option(
    "--trials",
    default=50,
    show_default=True,
    type=click.IntRange(min=1),
    help="Distinct configs evaluated per study (repeats and configs the constraints reject not counted).",
)
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds per study.")
@click.option("--sampler", type=click.Choice(["tpe", "gp", "random", "grid"]), default="tpe", show_default=True)
@click.option("--db", "db_url", help="Config database: path or SQLAlchemy URL (default: $AUTOTUNE_DB or ~/.cache).")
@click.option(
    "--storage", help="Shared Optuna storage: SQLAlchemy URL (several hosts) or journal file path (one host)."
)
@click.option("--workers", type=click.IntRange(min=1), help="Worker processes on one shared study: one GPU each.")
@click.option("--gpus", help="Comma-separated GPU indices: one worker process on each.")
@click.option(
    "--heartbeat",
    type=click.IntRange(min=1),
    help="Seconds between a worker's heartbeats on a server storage (default 10); a trial 3 beats late is retried.",
)
@click.option(
    "--examples",
    default=20,
    show_default=True,
    type=click.IntRange(min=1),
    help="Distinct Hypothesis problems per trial that its config applies to.",
)
@click.option(
    "--final-examples",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Distinct problems (on another seed) the fastest configs are re-verified on before one is stored.",
)
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--compile-workers",
    type=click.IntRange(min=0),
    help="Processes compiling candidates ahead (default: up to 8 on a GPU, none under the interpreter).",
)
@click.option(
    "--isolate/--no-isolate",
    default=None,
    help="Compile, verify and time each config in a worker process that a crash or hang cannot take down "
    "(default: on a GPU, or with --trial-timeout).",
)
@click.option(
    "--trial-timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds one config may take in the worker before it is killed and recorded as timeout [default: 300].",
)
@click.option(
    "--warm-start",
    "warm_start",
    multiple=True,
    metavar="CONFIG",
    help="A config to try among the first trials, as JSON (keys left out take the default's), e.g. one of a "
    "triton.autotune list; repeatable. Tried right after the space's default and the bucket's stored best (with "
    "--cold, right after the default), which --trials counts too. Verified and timed like every trial.",
)
@click.option(
    "--cold",
    is_flag=True,
    help="Start from the space alone (its default and its own starts), taking no database's rows as first trials.",
)
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
def search(
    kernel,
    gpu_name,
    dtypes,
    shapes,
    trials,
    timeout,
    sampler,
    db_url,
    storage,
    workers,
    gpus,
    heartbeat,
    examples,
    final_examples,
    seed,
    compile_workers,
    isolate,
    trial_timeout,
    warm_start,
    cold,
    fmt,
) -> None:
    """Tune KERNEL on this GPU: one Optuna study per dtype and shape bucket; store the best."""
    from tqdm import tqdm

    from autotune.engine.isolation import shared_workers, use_isolation
    from autotune.engine.outcome import TrialTally
    from autotune.engine.plan import SearchOptions, check_gpu, check_job, study_budget
    from autotune.engine.precompile import CompilePool, default_workers
    from autotune.engine.search import search as run_search

    spec = kernel_spec(kernel)
    warm_start = [config_option(spec, text, "--warm-start") for text in warm_start]
    try:
        isolate = use_isolation(isolate, trial_timeout, spec)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        info = check_gpu(gpu_name, isolated=isolate)
        problems = [spec.parse_shape(s) for s in shapes] or list(spec.presets_here())
    except gpu.GPUMismatchError as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--shape") from None
    try:  # before any study starts: a problem too large for the device is one line, not an out-of-memory error
        for dtype in dtypes_of(dtypes, spec):
            for problem in problems:
                check_job(spec, spec.problem_for(problem, dtype), dtype, info)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    gpu.warn_if_interpreter_timings()
    options = SearchOptions(
        gpu_name=gpu_name,
        trials=trials,
        timeout=timeout,
        sampler=sampler,
        seed=seed,
        examples=examples,
        final_examples=final_examples,
        warm_start=warm_start,
        cold=cold,
        **({"heartbeat_s": heartbeat} if heartbeat else {}),
    )
    if storage or workers or gpus:
        if compile_workers:
            raise click.UsageError(
                "--compile-workers is for a one-process search; not with --storage, --workers or --gpus"
            )
        jobs = [(problem, dtype) for dtype in dtypes_of(dtypes, spec) for problem in problems]
        emit([_search_row(spec, r) for r in _search_shared(spec, jobs, db_url, storage, workers, gpus, options)], fmt)
        return
    rows = []
    workers = default_workers() if compile_workers is None else compile_workers
    with open_store(db_url) as store, contextlib.ExitStack() as stack:
        pool = stack.enter_context(CompilePool(workers, timeout=trial_timeout)) if workers > 1 else 0
        stack.enter_context(shared_workers())  # each study's evaluation worker is handed on to the next
        for dtype in dtypes_of(dtypes, spec):
            for problem in problems:
                label = f"{spec.name} {DTYPE_NAMES[dtype]} {spec.bucket(problem)}"
                budget = study_budget(spec, spec.problem_for(problem, dtype), sampler, trials)
                tally = TrialTally()  # the bar counts as the budget does: distinct configs evaluated
                with tqdm(total=budget, desc=label, unit="config", file=sys.stderr, leave=False) as bar:

                    def tick(outcome, best_ms):
                        counted = tally.add(outcome)
                        note = f"best {best_ms:.4g} ms" if best_ms else outcome.outcome
                        bar.set_postfix_str(", ".join(filter(None, [note, tally.uncounted()])), refresh=not counted)
                        bar.update(int(counted))
                        if outcome.outcome in FAULTS:
                            bar.write(_fault_line(label, outcome), file=sys.stderr)

                    def final_checked(config, verdict, seconds):
                        outcome = "passed" if verdict.passed else f"failed: {verdict.explain()}"
                        bar.write(
                            f"{label}: final check of {json.dumps(config)}: {outcome} "
                            f"({verdict.examples} problems, {seconds:.1f} s)",
                            file=sys.stderr,
                        )

                    study_options = dataclasses.replace(
                        options,
                        isolate=isolate,
                        trial_timeout=trial_timeout,
                        on_trial=tick,
                        on_final_check=final_checked,
                    )
                    result = run_search(
                        spec, problem, dtype, study_options, store=store, storage=storage, compile_workers=pool
                    )
                phases = ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items())
                click.echo(
                    f"{label}: {result.evaluated_summary()}; {result.compiled_ahead} compiled ahead; seconds: {phases}",
                    err=True,
                )
                rows.append(_search_row(spec, result))
    emit(rows, fmt)
    if any(r["best config"] is None for r in rows):
        raise click.ClickException("no verified config found for some studies (see the table)")


@main.command()
@click.option(
    "--kernel",
    "kernels",
    multiple=True,
    help="Only this kernel (repeatable; a name or module:attr path; default: every shipped and registered one).",
)
@click.option("--budget", default="1h", show_default=True, help="Time for the whole run: 2h, 20m, 90s, 1h30m.")
@click.option("--db", "db_url", help="Database to store into and resume from (default: $AUTOTUNE_DB or ~/.cache).")
@click.option(
    "--dtype", "dtypes", multiple=True, help="Only this dtype (repeatable; default: every one each kernel supports)."
)
@click.option(
    "--trials",
    default=1000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Most trials per study (the budget usually ends it first).",
)
@click.option(
    "--examples",
    default=20,
    show_default=True,
    type=click.IntRange(min=1),
    help="Distinct problems each trial's config is verified on.",
)
@click.option(
    "--final-examples",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Distinct problems (another seed) each winner is re-verified on before it is stored.",
)
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
def retune(kernels, budget, db_url, dtypes, trials, examples, final_examples, fmt) -> None:
    """Tune every kernel's presets in every dtype on this GPU within one time budget; run again to continue."""
    from tqdm import tqdm

    from autotune.engine import retune as retuning
    from autotune.engine.plan import SearchOptions
    from autotune.engine.precompile import default_workers

    try:
        budget_s = retuning.parse_budget(budget)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--budget") from None
    specs = [kernel_spec(k) for k in dict.fromkeys(kernels)] or [registry.get(n) for n in registry.names()]
    gpu.warn_if_interpreter_timings()
    options = SearchOptions(trials=trials, examples=examples, final_examples=final_examples)
    with open_store(db_url) as store, tqdm(desc="retune", unit="study", file=sys.stderr) as bar:

        def started(study, i: int, total: int) -> None:
            bar.total = total
            bar.set_postfix_str(study.label)

        def done(outcome) -> None:
            bar.update(1)

        try:
            report = retuning.retune(
                specs,
                budget_s=budget_s,
                store=store,
                options=options,
                dtypes=dtypes_of(dtypes, None),
                compile_workers=default_workers(),
                on_start=started,
                on_done=done,
            )
        except gpu.GPUMismatchError as exc:
            raise click.ClickException(str(exc)) from None
    counts = ", ".join(
        f"{report.count(s)} {s}"
        for s in (retuning.STORED, retuning.KEPT, retuning.NOT_FOUND, retuning.NOT_RUN, retuning.FAILED)
    )
    click.echo(f"retune on {report.gpu}: {len(report.outcomes)} studies in {budget}: {counts}", err=True)
    emit([o.row() for o in report.outcomes], fmt)
    if report.interrupted:
        raise click.ClickException("interrupted: `autotune retune` with the same --db continues where this stopped")
    if report.count(retuning.FAILED):
        raise click.ClickException(f"{report.count(retuning.FAILED)} studies raised (see the table)")


def _gpu_list(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(g) for g in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected GPU indices like 0,1, got {text!r}", param_hint="--gpus") from None


def _search_shared(spec, jobs, db_url, storage, workers, gpus, options) -> list:
    from tqdm import tqdm

    from autotune.engine.distributed import search_parallel

    gpu_indices = _gpu_list(gpus)
    with open_store(db_url) as store, tqdm(desc=f"{spec.name}: evaluations", file=sys.stderr, leave=False) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        try:
            results = search_parallel(
                spec,
                jobs,
                options,
                workers=workers or 1,
                gpus=gpu_indices,
                storage=storage,
                store=store,
                on_progress=progress,
            )
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    for r in results:
        for outcome in r.trials:
            if outcome.outcome in FAULTS:
                click.echo(_fault_line(r.study_name, outcome), err=True)
        click.echo(
            f"{r.study_name}: {r.evaluations} evaluated in {len(r.trials)} trials; seconds: "
            + ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items()),
            err=True,
        )
    if any(r.best_config is None for r in results):
        emit([_search_row(spec, r) for r in results], "table")
        raise click.ClickException("no verified config found for some studies (see the table)")
    return results


@main.command()
@click.option("--storage", required=True, help="The Optuna storage the studies live in (as given to search).")
@click.option(
    "--study", "studies", multiple=True, help="Study to work on (repeatable; default: every autotune study there)."
)
@click.option(
    "--worker-index", type=click.IntRange(min=0), help="Makes this worker's sampler seed its own (default: process id)."
)
def worker(storage: str, studies: tuple[str, ...], worker_index: int | None) -> None:
    """Join shared search studies and run their trials until each budget is spent."""
    from autotune.engine.worker import run_worker

    try:
        ran = run_worker(storage, studies, index=worker_index)
    except (ValueError, gpu.GPUMismatchError, registry.UnknownKernel) as exc:
        raise click.ClickException(str(exc)) from None
    for name, count in ran.items():
        click.echo(f"{name}: {count} trial(s) run here")


def _fault_line(label: str, outcome) -> str:
    return f"{label}: trial {outcome.number} {json.dumps(outcome.config)}: {outcome.outcome}: {outcome.reason}"


def _search_row(spec: autotune.KernelSpec, r) -> dict:
    return {
        "kernel": r.kernel,
        "dtype": r.dtype,
        "shape": shape_label(r.problem),
        "bucket": r.bucket,
        "best config": json.dumps(r.best_config) if r.best_config else None,
        "ms": r.best_ms,
        "rate": "n/a (interpreter)"
        if r.gpu == gpu.CPU_INTERPRETER
        else (r.rate.headline(spec.bound) if r.rate else ""),
        "vs default": r.speedup_vs_default,
        "vs torch": r.speedup_vs_baseline,
        "trials": r.tally().describe(),
        "stored": r.stored,
    }
