"""The `autotune` command: parse options, call the library, print the result."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
import time
from collections.abc import Sequence

import click
from tabulate import tabulate

import autotune
from autotune import gpu
from autotune.identity import FAULTS
from autotune.runtime import registry
from autotune.spec import DTYPE_NAMES, dtype_from_name, shape_label

FORMATS = click.Choice(["table", "json", "csv"])


def _spec(name: str) -> autotune.KernelSpec:
    try:
        return registry.get(name)
    except registry.UnknownKernel as exc:
        raise click.UsageError(str(exc)) from None


def _dtypes(names: Sequence[str], spec: autotune.KernelSpec | None):
    if not names:
        return list(spec.dtypes) if spec else []
    try:
        return [dtype_from_name(n) for n in names]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dtype") from None


def _store(url: str | None, *, readonly: bool = False):
    """The config database a command reads (readonly) or writes; one clear line if it cannot."""
    from autotune.db import ConfigStore, StoreError, as_url

    try:
        store = ConfigStore(as_url(url) if url else None, readonly=readonly)
    except (StoreError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    if not readonly and store.in_memory:
        store.close()
        raise click.ClickException(f"{store.where} is held in memory and lost when the command ends: "
                                   "pass a file path or a database server URL")
    return store


def _require_database(url: str | None) -> None:
    """A command that only reads or rewrites rows must not create the database a mistyped path names."""
    from autotune.db import as_url, default_url, sqlite_path

    path = sqlite_path(as_url(url) if url else default_url())
    if path is not None and not os.path.isfile(path):
        raise click.ClickException(f"no database at {path}")
    if path is not None and os.path.getsize(path) == 0:
        raise click.ClickException(f"{path} is empty: not an autotune database")


def _config_option(spec: autotune.KernelSpec, text: str, option: str) -> dict:
    """A config given as a JSON object on the command line, keys left out taken from the default, validated."""
    try:
        return spec.space.config_from_json(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def _emit(rows: list[dict], fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2, default=str))
    elif fmt == "csv":
        buf = io.StringIO()
        if rows:
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        click.echo(buf.getvalue(), nl=False)
    else:
        click.echo(tabulate(rows, headers="keys", floatfmt=".4g") if rows else "no rows")


@click.group()
@click.version_option(autotune.__version__)
def main() -> None:
    """Search, verify and ship tuned Triton kernel configs."""


@main.command("list")
def list_kernels() -> None:
    """The kernels autotune knows (shipped and registered)."""
    rows = [{"kernel": n, "description": registry.get(n).description, "space size": registry.get(n).space.size()} for n in registry.names()]
    _emit(rows, "table")


@main.command("gpu")
def gpu_info() -> None:
    """The device kernels run on here, and its peaks."""
    _emit([{"field": field, "value": value} for field, value in gpu.current_gpu().describe()], "table")


@main.command()
@click.argument("kernel")
@click.option("--config", "config_json", help="Config as JSON; parameters left out take the default's values.")
@click.option("--dtype", "dtypes", multiple=True, help="fp32, fp16 or bf16 (repeatable; default: all the kernel supports).")
@click.option("--examples", default=100, show_default=True,
              help="Distinct Hypothesis problems per dtype that the config applies to.")
@click.option("--seed", default=0, show_default=True)
def verify(kernel: str, config_json: str | None, dtypes: tuple[str, ...], examples: int, seed: int) -> None:
    """Check a config against float64 on Hypothesis-drawn problems; exit 1 on any failure."""
    from tqdm import tqdm

    from autotune.gate.verify import verify as run_verify

    spec = _spec(kernel)
    config = _config_option(spec, config_json or "{}", "--config")
    rows, failed = [], False
    for dtype in _dtypes(dtypes, spec):
        label, started = f"{spec.name} {DTYPE_NAMES[dtype]}", time.monotonic()
        with tqdm(total=examples, desc=label, unit="problem", file=sys.stderr, leave=False) as bar:
            failed_once = []

            def checked(problem, failure) -> None:
                if failure:
                    failed_once.append(True)
                bar.total = max(bar.total, bar.n + 1)  # shrinking a failure runs problems past those asked
                bar.set_postfix_str(("shrinking a failure: " if failed_once else "") + shape_label(problem), refresh=False)
                bar.update(1)
                bar.refresh()  # each problem drawn: checks are slow enough, and the count is what a user waits on

            result = run_verify(spec, config, dtype, examples=examples, seed=seed, on_check=checked)
        click.echo(f"{label}: {'pass' if result.passed else 'FAIL'}, {result.examples} problems checked "
                   f"in {time.monotonic() - started:.1f} s", err=True)
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
    _emit(rows, "table")
    if failed:
        sys.exit(1)


@main.command()
@click.argument("kernel")
@click.option("--gpu", "gpu_name", default="auto", show_default=True, help="GPU to tune for; must be this machine's.")
@click.option("--dtype", "dtypes", multiple=True, help="Repeatable; default: all the kernel supports.")
@click.option("--shape", "shapes", multiple=True, help="Problem shape like 4096x8192 (repeatable; default: presets).")
@click.option("--trials", default=50, show_default=True,
              help="Distinct configs evaluated per study (repeats and configs the constraints reject not counted).")
@click.option("--timeout", type=float, help="Seconds per study.")
@click.option("--sampler", type=click.Choice(["tpe", "gp", "random", "grid"]), default="tpe", show_default=True)
@click.option("--db", "db_url", help="Config database: path or SQLAlchemy URL (default: $AUTOTUNE_DB or ~/.cache).")
@click.option("--storage", help="Shared Optuna storage: SQLAlchemy URL (several hosts) or journal file path (one host).")
@click.option("--workers", type=click.IntRange(min=1), help="Worker processes on one shared study: one GPU each.")
@click.option("--gpus", help="Comma-separated GPU indices: one worker process on each.")
@click.option("--heartbeat", type=click.IntRange(min=1),
              help="Seconds between a worker's heartbeats on a server storage (default 10); a trial 3 beats late is retried.")
@click.option("--examples", default=20, show_default=True,
              help="Distinct Hypothesis problems per trial that its config applies to.")
@click.option("--final-examples", default=100, show_default=True, type=click.IntRange(min=1),
              help="Distinct problems (on another seed) the fastest configs are re-verified on before one is stored.")
@click.option("--seed", default=0, show_default=True)
@click.option("--compile-workers", type=click.IntRange(min=0),
              help="Processes compiling candidates ahead (default: up to 8 on a GPU, none under the interpreter).")
@click.option("--isolate/--no-isolate", default=None,
              help="Compile, verify and time each config in a worker process that a crash or hang cannot take down "
                   "(default: on a GPU, or with --trial-timeout).")
@click.option("--trial-timeout", type=click.FloatRange(min=0, min_open=True),
              help="Seconds one config may take in the worker before it is killed and recorded as timeout [default: 300].")
@click.option("--warm-start", "warm_start", multiple=True, metavar="CONFIG",
              help="A config to try first, as JSON (keys left out take the default's), e.g. one of a triton.autotune "
                   "list; repeatable. Verified and timed like every trial.")
@click.option("--cold", is_flag=True,
              help="Start from the space alone (its default and its own starts), taking no database's rows as first trials.")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
def search(kernel, gpu_name, dtypes, shapes, trials, timeout, sampler, db_url, storage, workers, gpus, heartbeat, examples,
           final_examples, seed, compile_workers, isolate, trial_timeout, warm_start, cold, fmt) -> None:
    """Tune KERNEL on this GPU: one Optuna study per dtype and shape bucket; store the best."""
    from tqdm import tqdm

    from autotune.engine.isolation import shared_workers, use_isolation
    from autotune.engine.outcome import TrialTally
    from autotune.engine.plan import SearchOptions, check_gpu, check_job, study_budget
    from autotune.engine.precompile import CompilePool, default_workers
    from autotune.engine.search import search as run_search

    spec = _spec(kernel)
    warm_start = [_config_option(spec, text, "--warm-start") for text in warm_start]
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
        for dtype in _dtypes(dtypes, spec):
            for problem in problems:
                check_job(spec, spec.problem_for(problem, dtype), dtype, info)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    gpu.warn_if_interpreter_timings()
    if storage or workers or gpus:
        if compile_workers:
            raise click.UsageError("--compile-workers is for a one-process search; not with --storage, --workers or --gpus")
        jobs = [(problem, dtype) for dtype in _dtypes(dtypes, spec) for problem in problems]
        options = SearchOptions(gpu_name=gpu_name, trials=trials, timeout=timeout, sampler=sampler, seed=seed,
                                examples=examples, final_examples=final_examples, warm_start=warm_start, cold=cold,
                                **({"heartbeat_s": heartbeat} if heartbeat else {}))
        _emit([_search_row(spec, r) for r in _search_shared(spec, jobs, db_url, storage, workers, gpus, options)], fmt)
        return
    rows = []
    workers = default_workers() if compile_workers is None else compile_workers
    with _store(db_url) as store, contextlib.ExitStack() as stack:
        pool = stack.enter_context(CompilePool(workers, timeout=trial_timeout)) if workers > 1 else 0
        stack.enter_context(shared_workers())  # each study's evaluation worker is handed on to the next
        for dtype in _dtypes(dtypes, spec):
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
                        bar.write(f"{label}: final check of {json.dumps(config)}: {outcome} "
                                  f"({verdict.examples} problems, {seconds:.1f} s)", file=sys.stderr)

                    options = SearchOptions(
                        gpu_name=gpu_name, trials=trials, timeout=timeout, sampler=sampler, seed=seed, examples=examples,
                        final_examples=final_examples, isolate=isolate, trial_timeout=trial_timeout,
                        warm_start=warm_start, cold=cold, on_trial=tick, on_final_check=final_checked,
                    )
                    result = run_search(spec, problem, dtype, options, store=store, storage=storage, compile_workers=pool)
                phases = ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items())
                click.echo(f"{label}: {result.evaluated_summary()}; {result.compiled_ahead} compiled ahead; seconds: {phases}",
                           err=True)
                rows.append(_search_row(spec, result))
    _emit(rows, fmt)
    if any(r["best config"] is None for r in rows):
        raise click.ClickException("no verified config found for some studies (see the table)")


@main.command()
@click.option("--kernel", "kernels", multiple=True,
              help="Only this kernel (repeatable; a name or module:attr path; default: every shipped and registered one).")
@click.option("--budget", default="1h", show_default=True, help="Time for the whole run: 2h, 20m, 90s, 1h30m.")
@click.option("--db", "db_url", help="Database to store into and resume from (default: $AUTOTUNE_DB or ~/.cache).")
@click.option("--dtype", "dtypes", multiple=True, help="Only this dtype (repeatable; default: every one each kernel supports).")
@click.option("--trials", default=1000, show_default=True, help="Most trials per study (the budget usually ends it first).")
@click.option("--examples", default=20, show_default=True, help="Distinct problems each trial's config is verified on.")
@click.option("--final-examples", default=100, show_default=True, type=click.IntRange(min=1),
              help="Distinct problems (another seed) each winner is re-verified on before it is stored.")
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
    specs = [_spec(k) for k in dict.fromkeys(kernels)] or [registry.get(n) for n in registry.names()]
    gpu.warn_if_interpreter_timings()
    options = SearchOptions(trials=trials, examples=examples, final_examples=final_examples)
    with _store(db_url) as store, tqdm(desc="retune", unit="study", file=sys.stderr) as bar:

        def started(study, i: int, total: int) -> None:
            bar.total = total
            bar.set_postfix_str(study.label)

        def done(outcome) -> None:
            bar.update(1)

        try:
            report = retuning.retune(specs, budget_s=budget_s, store=store, options=options,
                                     dtypes=_dtypes(dtypes, None), compile_workers=default_workers(),
                                     on_start=started, on_done=done)
        except gpu.GPUMismatchError as exc:
            raise click.ClickException(str(exc)) from None
    counts = ", ".join(f"{report.count(s)} {s}" for s in (retuning.STORED, retuning.KEPT, retuning.NOT_FOUND,
                                                           retuning.NOT_RUN, retuning.FAILED))
    click.echo(f"retune on {report.gpu}: {len(report.outcomes)} studies in {budget}: {counts}", err=True)
    _emit([o.row() for o in report.outcomes], fmt)
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
    with _store(db_url) as store, tqdm(desc=f"{spec.name}: evaluations", file=sys.stderr, leave=False) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        try:
            results = search_parallel(spec, jobs, options, workers=workers or 1, gpus=gpu_indices, storage=storage,
                                      store=store, on_progress=progress)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    for r in results:
        for outcome in r.trials:
            if outcome.outcome in FAULTS:
                click.echo(_fault_line(r.study_name, outcome), err=True)
        click.echo(f"{r.study_name}: {r.evaluations} evaluated in {len(r.trials)} trials; seconds: "
                   + ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items()), err=True)
    if any(r.best_config is None for r in results):
        _emit([_search_row(spec, r) for r in results], "table")
        raise click.ClickException("no verified config found for some studies (see the table)")
    return results


@main.command()
@click.option("--storage", required=True, help="The Optuna storage the studies live in (as given to search).")
@click.option("--study", "studies", multiple=True, help="Study to work on (repeatable; default: every autotune study there).")
@click.option("--worker-index", type=click.IntRange(min=0), help="Makes this worker's sampler seed its own (default: process id).")
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
        "rate": "n/a (interpreter)" if r.gpu == gpu.CPU_INTERPRETER else (r.rate.headline(spec.bound) if r.rate else ""),
        "vs default": r.speedup_vs_default,
        "vs torch": r.speedup_vs_baseline,
        "trials": r.tally().describe(),
        "stored": r.stored,
    }


@main.command("bench")
@click.argument("kernels", nargs=-1)
@click.option("--all", "all_kernels", is_flag=True, help="Every shipped kernel, backward kernels included.")
@click.option("--against", default="torch,compile,default", show_default=True,
              help="Comma-separated: default (config), torch (eager), compile (torch.compile of it), vendor (library "
                   "call), liger (Liger-Kernel's op, where installed), copy (a device copy of the bytes it must move).")
@click.option("--backward", is_flag=True,
              help="Time forward + backward through autograd, as training runs it (kernels with a _backward kernel).")
@click.option("--gpu", "gpu_name", default="auto", show_default=True,
              help="GPU whose tuned rows to measure; must be this machine's.")
@click.option("--dtype", "dtypes", multiple=True,
              help="Repeatable; default: all each kernel supports (fp32 alone under the interpreter).")
@click.option("--shape", "shapes", multiple=True,
              help="SPEC for the one kernel named, else KERNEL=SPEC (repeatable; default: presets, small ones without a GPU).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Also draw % of roofline per shape into this PNG.")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
@click.option("--graphs", is_flag=True,
              help="Also time each call replayed from a CUDA graph: the GPU's time without the host's (GPU only).")
@click.option("--out", "prefix", help="Also write PREFIX.md (the table) and PREFIX.json (every measurement), "
                                      "updated after each shape, so a run cut short keeps what it measured.")
def bench(kernels, all_kernels, against, backward, gpu_name, dtypes, shapes, plot_path, graphs, fmt, prefix) -> None:
    """Time KERNEL's tuned config against its default config, PyTorch eager and torch.compile, side by side."""
    from autotune.measure import plot
    from autotune.measure import report

    if all_kernels == bool(kernels):
        raise click.UsageError("name the kernels to measure, or pass --all (not both)")
    for name in kernels:
        _spec(name)  # an unknown name is one clear line
    names = registry.shipped() if all_kernels else list(dict.fromkeys(kernels))
    try:
        impls = ["tuned", *report.parse_against(against)]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--against") from None
    try:
        gpu.require_gpu(gpu_name, "a benchmark measures the GPU it runs on: run it there, or pass --gpu auto")
        by_kernel = report.shapes_by_kernel(shapes, names)
        if backward:
            for name in names:
                report.backward_spec(name)
        todo = report.plan(names, _dtypes(dtypes, None), by_kernel, skip_unsupported=all_kernels)
        if plot_path:
            plot.require_matplotlib()
        if graphs and gpu.device().type != "cuda":
            raise click.BadParameter("CUDA graphs need a CUDA GPU; this run has none", param_hint="--graphs")
    except (gpu.GPUMismatchError, plot.PlotUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    gpu.warn_if_interpreter_timings()

    def progress(i: int, case) -> None:
        click.echo(f"[{i + 1}/{len(todo.cases)}] {case.spec.name} {DTYPE_NAMES[case.dtype]} {shape_label(case.problem)}", err=True)

    def save_so_far(partial: dict) -> None:
        partial["rows"] = report.rows(partial)
        report.save(prefix, partial, report.text(partial))

    result = report.measure(todo, impls, graphs=graphs, backward=backward, on_case=progress,
                            on_measured=save_so_far if prefix else None)
    result["rows"] = report.rows(result)
    text = report.text(result)
    if fmt == "table":
        click.echo(text)
    elif fmt == "json":
        click.echo(json.dumps(result, indent=1, default=str))
    else:
        _emit(result["rows"], fmt)
    if prefix:
        click.echo(f"wrote {report.save(prefix, result, text)} and .md", err=True)
    if plot_path:
        click.echo(f"wrote {plot.plot(result, plot_path)}", err=True)
    if report.errors(result):
        raise click.ClickException(f"{len(report.errors(result))} measurement(s) failed (see the notes)")


@main.command()
@click.argument("kernel")
@click.option("--gpu", "gpu_name", help="GPU whose rows to show (any GPU; none needed here).")
@click.option("--dtype", help="fp32, fp16 or bf16.")
@click.option("--db", "db_url", help="Config database (default: $AUTOTUNE_DB or ~/.cache).")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
def query(kernel: str, gpu_name: str | None, dtype: str | None, db_url: str | None, fmt: str) -> None:
    """Show stored best configs of KERNEL with their evidence."""
    from autotune.db import StoreError
    from autotune.runtime.query import gpus_with_rows_note, stored_rows

    spec = _spec(kernel)
    if dtype:
        try:
            dtype = DTYPE_NAMES[dtype_from_name(dtype)]
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--dtype") from None
    gpu_name = gpu.normalize_gpu_name(gpu_name) if gpu_name else None
    try:
        rows = stored_rows(spec, db_url=db_url, gpu=gpu_name, dtype=dtype)
    except (StoreError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    if fmt == "table":
        keep = ("gpu", "dtype", "bucket", "config", "time_ms", "timing", "vs_default", "vs_torch", "examples", "verified",
                "current", "source")
        rows = [{k: r[k] for k in keep} for r in rows]
    if not rows and gpu_name:  # say which GPUs have rows; on stderr where stdout is for machines
        click.echo(gpus_with_rows_note(spec, gpu_name, db_url=db_url, dtype=dtype), err=fmt != "table")
        if fmt == "table":
            return
    _emit(rows, fmt)


@main.group()
def db() -> None:
    """Move config databases around and re-verify their rows."""


@db.command("export")
@click.option("--gpu", "gpu_name", required=True, help="GPU whose rows to export.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="New file to write.")
@click.option("--kernel", help="Only this kernel's rows (a name or module:attr path; required by --format triton|json).")
@click.option("--db", "db_url", help="Source database (default: $AUTOTUNE_DB or ~/.cache).")
@click.option("--all-sources", is_flag=True, help="Also rows tuned for older sources of a kernel (default: current only).")
@click.option("--format", "fmt", type=click.Choice(["db", "triton", "json"]), default="db", show_default=True,
              help="db: a database file; triton: a Python module of triton.Config lists per bucket; json: "
                   "{gpu: {dtype: {bucket: config}}}.")
def db_export(gpu_name: str, output: str, kernel: str | None, db_url: str | None, all_sources: bool, fmt: str) -> None:
    """Write one GPU's best configs into a new file: a database, or for one kernel, code that needs no autotune."""
    gpu_name = gpu.normalize_gpu_name(gpu_name)
    if fmt != "db":
        _export_portable(gpu_name, output, kernel, db_url, all_sources, fmt)
        return
    with _store(db_url, readonly=True) as store:
        try:
            n = store.export(output, gpu=gpu_name, kernel=kernel,
                             keep=None if all_sources else _tuned_for_current_source)
        except FileExistsError:
            raise click.ClickException(f"{output} exists; choose a new file") from None
    click.echo(f"exported {n} row(s) for {gpu_name} to {output}")


def _export_portable(gpu_name: str, output: str, kernel: str | None, db_url: str | None, all_sources: bool,
                     fmt: str) -> None:
    from autotune.db import portable

    if not kernel:
        raise click.UsageError(f"--format {fmt} exports one kernel's configs: give --kernel")
    if all_sources:
        raise click.UsageError("--all-sources is for --format db: a triton or json export holds the configs served now")
    spec = _spec(kernel)
    _require_database(db_url)
    with _store(db_url, readonly=True) as store:
        rows = [r for r in store.best_rows(kernel=spec.name, gpu=gpu_name, source_hash=spec.source_hash) if not r.flagged]
    if not rows:
        raise click.ClickException(f"no rows of {spec.name} on {gpu_name} tuned for its current source to export")
    try:
        text = (portable.as_triton_module(spec.name, gpu_name, rows, source=f" (source {spec.source_hash})")
                if fmt == "triton" else portable.json_text(rows))
        portable.write_new(output, text)
    except portable.UnportableRow as exc:
        raise click.ClickException(str(exc)) from None
    except FileExistsError:
        raise click.ClickException(f"{output} exists; choose a new file") from None
    click.echo(f"exported {len(rows)} config(s) of {spec.name} on {gpu_name} to {output} ({fmt})")


def _tuned_for_current_source(row) -> bool:
    """False for a row tuned for an older source of a known kernel: the runtime ignores it (with a warning)."""
    if row.kernel not in registry.names():
        return True
    return registry.get(row.kernel).source_hash == row.source_hash


@db.command("prune")
@click.option("--db", "db_url", help="Database to prune: path or SQLAlchemy URL (default: $AUTOTUNE_DB or ~/.cache).")
@click.option("--gpu", "gpu_name", help="Only this GPU's rows.")
@click.option("--kernel", help="Only this kernel's rows.")
def db_prune(db_url: str | None, gpu_name: str | None, kernel: str | None) -> None:
    """Delete the rows tuned for an older source of their kernel (the runtime ignores them), in one transaction."""
    _require_database(db_url)
    with _store(db_url) as store:
        n = store.prune(lambda row: not _tuned_for_current_source(row), kernel=kernel,
                        gpu=gpu.normalize_gpu_name(gpu_name) if gpu_name else None)
    click.echo(f"deleted {n} row(s) tuned for an older kernel source")


@db.command("verify")
@click.option("--gpu", "gpu_name", help="GPU whose rows to re-verify; must be this machine's (default: this machine's).")
@click.option("--db", "db_url", help="Database to re-verify and record into: path or SQLAlchemy URL (default: $AUTOTUNE_DB or ~/.cache).")
@click.option("--kernel", "kernels", multiple=True, help="Only this kernel's rows (repeatable; a name or module:attr path).")
@click.option("--examples", type=click.IntRange(min=1),
              help="Distinct Hypothesis problems per row that its config applies to, at least one more than its "
                   "search verified [default: 200].")
@click.option("--seed", type=int, help="Hypothesis seed [default: a fresh one, printed and recorded].")
@click.option("--unverified", "unverified_only", is_flag=True,
              help="Only rows never re-verified (to finish a run that was cut short).")
@click.option("--flagged", "flagged_only", is_flag=True,
              help="Only rows whose latest re-verification failed (each checked on its failing problem first).")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
def db_verify(gpu_name: str | None, db_url: str | None, kernels: tuple[str, ...], examples: int | None, seed: int | None,
              unverified_only: bool, flagged_only: bool, fmt: str) -> None:
    """Re-verify every best row of this GPU on a fresh seed and record the outcomes; a row that fails is
    flagged and no longer served. Exit 1 if any row fails or its verification raises."""
    from tqdm import tqdm

    from autotune.measure.reverify import fresh_seed, gpu_to_verify, reverify_rows

    specs = [_spec(k) for k in kernels]
    try:
        gpu_to_verify(gpu_name)  # before the database is opened (and, if old, upgraded)
    except gpu.GPUMismatchError as exc:
        raise click.ClickException(str(exc)) from None
    _require_database(db_url)
    store = _store(db_url)  # refused before anything else is said or done
    seed = fresh_seed() if seed is None else seed
    click.echo(f"db verify: seed {seed}", err=True)  # first, so a run that dies can be repeated
    with store, tqdm(desc="db verify", unit="row", file=sys.stderr, leave=False) as bar:

        def progress(verdict, done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)
            bar.set_postfix_str(f"{verdict.kernel} {verdict.dtype} {verdict.bucket}: {verdict.result}")

        report = reverify_rows(store, gpu_name=gpu_name, kernels=specs, examples=examples, seed=seed, on_row=progress,
                               unverified_only=unverified_only, flagged_only=flagged_only)
    counts = {r: sum(v.result == r for v in report.rows) for r in ("pass", "FAIL", "error", "skipped")}
    click.echo(f"{report.gpu}: {len(report.rows)} row(s) on seed {report.seed}, at least {report.examples} distinct "
               f"Hypothesis problems its config applies to each (fewer where under 1% of draws apply) plus the "
               f"bucket's edges: {counts['pass']} pass, {counts['FAIL']} FAIL (flagged, no longer served), "
               f"{counts['error']} error (verification raised; not recorded), {counts['skipped']} skipped", err=True)
    rows = [{"kernel": v.kernel, "dtype": v.dtype, "bucket": v.bucket, "examples": v.examples, "result": v.result,
             "minimal failing problem / why skipped": v.detail, **({"config": v.config_json} if fmt != "table" else {})}
            for v in report.rows]
    _emit(rows, fmt)
    if report.failed or report.errored:
        sys.exit(1)


@db.command("merge")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--db", "db_url", help="Target database (default: $AUTOTUNE_DB or ~/.cache).")
@click.option("--kernel", "kernels", multiple=True,
              help="A kernel that is not registered (module:attr), so that its rows can be checked and merged "
                   "(repeatable).")
def db_merge(files: tuple[str, ...], db_url: str | None, kernels: tuple[str, ...]) -> None:
    """Merge best configs from FILES into the database, keeping the faster row of each key. Every row of every
    file is checked first (a registered kernel, its config in the kernel's space, its fields well formed); one
    bad row and nothing is merged. All files are merged in one transaction."""
    from autotune.db import StoreError
    from autotune.ship.merge import read_files

    specs = [_spec(k) for k in kernels]
    try:
        batches = read_files(files, specs)  # every file read and checked before the target is opened
    except (StoreError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    with _store(db_url) as store:
        counts = store.merge_rows(batches)
    for (f, _), (read, taken) in zip(batches, counts):
        click.echo(f"{f}: {read} row(s) read, {taken} taken")


@db.command("upgrade")
@click.option("--db", "db_url", help="Database to upgrade: path or SQLAlchemy URL (default: $AUTOTUNE_DB or ~/.cache).")
def db_upgrade(db_url: str | None) -> None:
    """Bring a database written by an older autotune to this schema version, in place (reading never does)."""
    from autotune.db import SCHEMA_VERSION

    _require_database(db_url)
    with _store(db_url) as store:
        was = store.upgraded_from
    click.echo(f"{store.where}: upgraded from schema version {was} to {SCHEMA_VERSION}" if was is not None
               else f"{store.where}: already at schema version {SCHEMA_VERSION}")


if __name__ == "__main__":
    main()
