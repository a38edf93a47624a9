"""Commands that show: list, gpu, bench, query."""

from __future__ import annotations

import json

import click

from autotune import gpu
from autotune.cli.app import FORMATS, dtypes_of, emit, kernel_spec, main
from autotune.runtime import registry
from autotune.spec import DTYPE_NAMES, dtype_from_name, shape_label


@main.command("list")
def list_kernels() -> None:
    """The kernels autotune knows (shipped and registered)."""
    rows = [
        {"kernel": n, "description": registry.get(n).description, "space size": registry.get(n).space.size()}
        for n in registry.names()
    ]
    emit(rows, "table")


@main.command("gpu")
def gpu_info() -> None:
    """The device kernels run on here, and its peaks."""
    emit([{"field": field, "value": value} for field, value in gpu.current_gpu().describe()], "table")


@main.command("bench")
@click.argument("kernels", nargs=-1)
@click.option("--all", "all_kernels", is_flag=True, help="Every shipped kernel, backward kernels included.")
@click.option(
    "--against",
    default="torch,compile,default",
    show_default=True,
    help="Comma-separated: default (config), torch (eager), compile (torch.compile of it), vendor (library "
    "call), liger (Liger-Kernel's op, where installed), copy (a device copy of the bytes it must move); for "
    "flash_attn, sdpa-flash, sdpa-cudnn, sdpa-efficient, sdpa-math (torch's sdpa with that backend forced) and "
    "sdpa-default (none forced).",
)
@click.option(
    "--backward",
    is_flag=True,
    help="Time forward + backward through autograd, as training runs it (kernels with a _backward kernel).",
)
@click.option(
    "--gpu",
    "gpu_name",
    default="auto",
    show_default=True,
    help="GPU whose tuned rows to measure; must be this machine's.",
)
@click.option(
    "--dtype",
    "dtypes",
    multiple=True,
    help="Repeatable; default: all each kernel supports (fp32 alone under the interpreter).",
)
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    help="SPEC for the one kernel named, else KERNEL=SPEC (repeatable; default: presets, small ones without a GPU).",
)
@click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), help="Also draw % of roofline per shape into this PNG."
)
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
@click.option(
    "--graphs",
    is_flag=True,
    help="Also time each call replayed from a CUDA graph: the GPU's time without the host's (GPU only).",
)
@click.option(
    "--out",
    "prefix",
    help="Also write PREFIX.md (the table) and PREFIX.json (every measurement), "
    "updated after each shape, so a run cut short keeps what it measured.",
)
def bench(kernels, all_kernels, against, backward, gpu_name, dtypes, shapes, plot_path, graphs, fmt, prefix) -> None:
    """Time KERNEL's tuned config against its default config, PyTorch eager and torch.compile, side by side."""
    from autotune.measure import plot, report

    if all_kernels == bool(kernels):
        raise click.UsageError("name the kernels to measure, or pass --all (not both)")
    for name in kernels:
        kernel_spec(name)  # an unknown name is one clear line
    names = registry.shipped() if all_kernels else list(dict.fromkeys(kernels))
    try:
        impls = ["tuned", *report.parse_against(against, names)]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--against") from None
    try:
        gpu.require_gpu(gpu_name, "a benchmark measures the GPU it runs on: run it there, or pass --gpu auto")
        by_kernel = report.shapes_by_kernel(shapes, names)
        if backward:
            for name in names:
                report.backward_spec(name)
        todo = report.plan(names, dtypes_of(dtypes, None), by_kernel, skip_unsupported=all_kernels)
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
        click.echo(
            f"[{i + 1}/{len(todo.cases)}] {case.spec.name} {DTYPE_NAMES[case.dtype]} {shape_label(case.problem)}",
            err=True,
        )

    def save_so_far(partial: dict) -> None:
        partial["rows"] = report.rows(partial)
        report.save(prefix, partial, report.text(partial))

    result = report.measure(
        todo, impls, graphs=graphs, backward=backward, on_case=progress, on_measured=save_so_far if prefix else None
    )
    result["rows"] = report.rows(result)
    text = report.text(result)
    if fmt == "table":
        click.echo(text)
    elif fmt == "json":
        click.echo(json.dumps(result, indent=1, default=str))
    else:
        emit(result["rows"], fmt)
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

    spec = kernel_spec(kernel)
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
        keep = (
            "gpu",
            "dtype",
            "bucket",
            "config",
            "time_ms",
            "timing",
            "vs_default",
            "vs_torch",
            "examples",
            "verified",
            "current",
            "source",
        )
        rows = [{k: r[k] for k in keep} for r in rows]
    if not rows and gpu_name:  # say which GPUs have rows; on stderr where stdout is for machines
        click.echo(gpus_with_rows_note(spec, gpu_name, db_url=db_url, dtype=dtype), err=fmt != "table")
        if fmt == "table":
            return
    emit(rows, fmt)
