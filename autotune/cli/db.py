"""`autotune db`: export, prune, verify, merge, upgrade."""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from autotune import gpu
from autotune.cli.app import FORMATS, emit, kernel_spec, main, open_store, require_database
from autotune.runtime import registry


@main.group()
def db() -> None:
    """Move config databases around and re-verify their rows."""


@db.command("export")
@click.option("--gpu", "gpu_name", required=True, help="GPU whose rows to export.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="New file to write.")
@click.option(
    "--kernel", help="Only this kernel's rows (a name or module:attr path; required by --format triton|json)."
)
@click.option("--db", "db_url", help="Source database (default: $AUTOTUNE_DB or ~/.cache).")
@click.option(
    "--all-sources", is_flag=True, help="Also rows tuned for older sources of a kernel (default: current only)."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["db", "triton", "json"]),
    default="db",
    show_default=True,
    help="db: a database file; triton: a Python module of triton.Config lists per bucket; json: "
    "{gpu: {dtype: {bucket: config}}}.",
)
def db_export(gpu_name: str, output: str, kernel: str | None, db_url: str | None, all_sources: bool, fmt: str) -> None:
    """Write one GPU's best configs into a new file: a database, or for one kernel, code that needs no autotune."""
    gpu_name = gpu.normalize_gpu_name(gpu_name)
    if fmt != "db":
        _export_portable(gpu_name, output, kernel, db_url, all_sources, fmt)
        return
    with open_store(db_url, readonly=True) as store:
        try:
            n = store.export(
                output, gpu=gpu_name, kernel=kernel, keep=None if all_sources else _tuned_for_current_source
            )
        except FileExistsError:
            raise click.ClickException(f"{output} exists; choose a new file") from None
        except OSError as exc:  # no such folder, no permission
            raise click.ClickException(f"cannot write {output}: {exc.strerror or exc}") from None
    click.echo(f"exported {n} row(s) for {gpu_name} to {output}")


def _export_portable(
    gpu_name: str, output: str, kernel: str | None, db_url: str | None, all_sources: bool, fmt: str
) -> None:
    from autotune.db import portable

    if not kernel:
        raise click.UsageError(f"--format {fmt} exports one kernel's configs: give --kernel")
    if all_sources:
        raise click.UsageError("--all-sources is for --format db: a triton or json export holds the configs served now")
    spec = kernel_spec(kernel)
    require_database(db_url)
    with open_store(db_url, readonly=True) as store:
        found = store.best_rows(kernel=spec.name, gpu=gpu_name, source_hash=spec.current_hashes)
        rows = [_as_served(spec, r) for r in spec.current_rows(r for r in found if not r.flagged)]
    if not rows:
        raise click.ClickException(f"no rows of {spec.name} on {gpu_name} tuned for its current source to export")
    try:
        text = (
            portable.as_triton_module(spec.name, gpu_name, rows, source=f" (source {spec.source_hash})")
            if fmt == "triton"
            else portable.json_text(rows)
        )
        portable.write_new(output, text)
    except portable.UnportableRow as exc:
        raise click.ClickException(str(exc)) from None
    except FileExistsError:
        raise click.ClickException(f"{output} exists; choose a new file") from None
    except OSError as exc:  # no such folder, no permission
        raise click.ClickException(f"cannot write {output}: {exc.strerror or exc}") from None
    click.echo(f"exported {len(rows)} config(s) of {spec.name} on {gpu_name} to {output} ({fmt})")


def _as_served(spec, row):
    """row with its config as the runtime serves it: an earlier space's row completed (`current_config`)."""
    if row.source_hash == spec.source_hash:
        return row
    return dataclasses.replace(row, config_json=json.dumps(spec.current_config(row)))


def _tuned_for_current_source(row) -> bool:
    """False for a row tuned for an older source of a known kernel (not one its spec `extends`): the runtime
    ignores it (with a warning)."""
    if row.kernel not in registry.names():
        return True
    return registry.get(row.kernel).row_is_current(row)


@db.command("prune")
@click.option("--db", "db_url", help="Database to prune: path or SQLAlchemy URL (default: $AUTOTUNE_DB or ~/.cache).")
@click.option("--gpu", "gpu_name", help="Only this GPU's rows.")
@click.option("--kernel", help="Only this kernel's rows.")
def db_prune(db_url: str | None, gpu_name: str | None, kernel: str | None) -> None:
    """Delete the rows tuned for an older source of their kernel (the runtime ignores them), in one transaction."""
    require_database(db_url)
    with open_store(db_url) as store:
        n = store.prune(
            lambda row: not _tuned_for_current_source(row),
            kernel=kernel,
            gpu=gpu.normalize_gpu_name(gpu_name) if gpu_name else None,
        )
    click.echo(f"deleted {n} row(s) tuned for an older kernel source")


@db.command("verify")
@click.option(
    "--gpu", "gpu_name", help="GPU whose rows to re-verify; must be this machine's (default: this machine's)."
)
@click.option(
    "--db",
    "db_url",
    help="Database to re-verify and record into: path or SQLAlchemy URL (default: $AUTOTUNE_DB or ~/.cache).",
)
@click.option(
    "--kernel", "kernels", multiple=True, help="Only this kernel's rows (repeatable; a name or module:attr path)."
)
@click.option(
    "--examples",
    type=click.IntRange(min=1),
    help="Distinct Hypothesis problems per row that its config applies to, at least one more than its "
    "search verified [default: 200].",
)
@click.option("--seed", type=int, help="Hypothesis seed [default: a fresh one, printed and recorded].")
@click.option(
    "--unverified",
    "unverified_only",
    is_flag=True,
    help="Only rows never re-verified (to finish a run that was cut short).",
)
@click.option(
    "--flagged",
    "flagged_only",
    is_flag=True,
    help="Only rows whose latest re-verification failed (each checked on its failing problem first).",
)
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
def db_verify(
    gpu_name: str | None,
    db_url: str | None,
    kernels: tuple[str, ...],
    examples: int | None,
    seed: int | None,
    unverified_only: bool,
    flagged_only: bool,
    fmt: str,
) -> None:
    """Re-verify every best row of this GPU on a fresh seed and record the outcomes; a row that fails is
    flagged and no longer served. Exit 1 if any row fails or its verification raises."""
    from tqdm import tqdm

    from autotune.measure.reverify import fresh_seed, gpu_to_verify, reverify_rows

    specs = [kernel_spec(k) for k in kernels]
    try:
        gpu_to_verify(gpu_name)  # before the database is opened (and, if old, upgraded)
    except gpu.GPUMismatchError as exc:
        raise click.ClickException(str(exc)) from None
    require_database(db_url)
    store = open_store(db_url)  # refused before anything else is said or done
    seed = fresh_seed() if seed is None else seed
    click.echo(f"db verify: seed {seed}", err=True)  # first, so a run that dies can be repeated
    with store, tqdm(desc="db verify", unit="row", file=sys.stderr, leave=False) as bar:

        def progress(verdict, done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)
            bar.set_postfix_str(f"{verdict.kernel} {verdict.dtype} {verdict.bucket}: {verdict.result}")

        report = reverify_rows(
            store,
            gpu_name=gpu_name,
            kernels=specs,
            examples=examples,
            seed=seed,
            on_row=progress,
            unverified_only=unverified_only,
            flagged_only=flagged_only,
        )
    counts = {r: sum(v.result == r for v in report.rows) for r in ("pass", "FAIL", "error", "skipped")}
    click.echo(
        f"{report.gpu}: {len(report.rows)} row(s) on seed {report.seed}, at least {report.examples} distinct "
        f"Hypothesis problems its config applies to each (fewer where under 1% of draws apply) plus the "
        f"bucket's edges: {counts['pass']} pass, {counts['FAIL']} FAIL (flagged, no longer served), "
        f"{counts['error']} error (verification raised; not recorded), {counts['skipped']} skipped",
        err=True,
    )
    rows = [
        {
            "kernel": v.kernel,
            "dtype": v.dtype,
            "bucket": v.bucket,
            "examples": v.examples,
            "result": v.result,
            "minimal failing problem / why skipped": v.detail,
            **({"config": v.config_json} if fmt != "table" else {}),
        }
        for v in report.rows
    ]
    emit(rows, fmt)
    if report.failed or report.errored:
        sys.exit(1)


@db.command("merge")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--db", "db_url", help="Target database (default: $AUTOTUNE_DB or ~/.cache).")
@click.option(
    "--kernel",
    "kernels",
    multiple=True,
    help="A kernel that is not registered (module:attr), so that its rows can be checked and merged (repeatable).",
)
def db_merge(files: tuple[str, ...], db_url: str | None, kernels: tuple[str, ...]) -> None:
    """Merge best configs from FILES into the database, keeping the faster row of each key. Every row of every
    file is checked first (a registered kernel, its config in the kernel's space, its fields well formed); one
    bad row and nothing is merged. All files are merged in one transaction."""
    from autotune.db import StoreError
    from autotune.ship.merge import read_files

    specs = [kernel_spec(k) for k in kernels]
    try:
        batches = read_files(files, specs)  # every file read and checked before the target is opened
    except (StoreError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    with open_store(db_url) as store:
        counts = store.merge_rows(batches)
    for (f, _), (read, taken) in zip(batches, counts):
        click.echo(f"{f}: {read} row(s) read, {taken} taken")


@db.command("upgrade")
@click.option("--db", "db_url", help="Database to upgrade: path or SQLAlchemy URL (default: $AUTOTUNE_DB or ~/.cache).")
def db_upgrade(db_url: str | None) -> None:
    """Bring a database written by an older autotune to this schema version, in place (reading never does)."""
    from autotune.db import SCHEMA_VERSION

    require_database(db_url)
    with open_store(db_url) as store:
        was = store.upgraded_from
    click.echo(
        f"{store.where}: upgraded from schema version {was} to {SCHEMA_VERSION}"
        if was is not None
        else f"{store.where}: already at schema version {SCHEMA_VERSION}"
    )


if __name__ == "__main__":
    main()
