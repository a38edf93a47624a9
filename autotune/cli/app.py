"""The `autotune` command group and what its commands share: kernel and dtype arguments, databases, output."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence

import click
from tabulate import tabulate

import autotune
from autotune.runtime import registry
from autotune.spec import dtype_from_name

FORMATS = click.Choice(["table", "json", "csv"])


def kernel_spec(name: str) -> autotune.KernelSpec:
    try:
        return registry.get(name)
    except registry.UnknownKernel as exc:
        raise click.UsageError(str(exc)) from None


def dtypes_of(names: Sequence[str], spec: autotune.KernelSpec | None):
    if not names:
        return list(spec.dtypes) if spec else []
    try:
        return [dtype_from_name(n) for n in names]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dtype") from None


def open_store(url: str | None, *, readonly: bool = False):
    """The config database a command reads (readonly) or writes; one clear line if it cannot."""
    from autotune.db import ConfigStore, StoreError, as_url

    try:
        store = ConfigStore(as_url(url) if url else None, readonly=readonly)
    except (StoreError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    if not readonly and store.in_memory:
        store.close()
        raise click.ClickException(
            f"{store.where} is held in memory and lost when the command ends: pass a file path or a database server URL"
        )
    return store


def require_database(url: str | None) -> None:
    """A command that only reads or rewrites rows must not create the database a mistyped path names."""
    from autotune.db import as_url, default_url, sqlite_path

    path = sqlite_path(as_url(url) if url else default_url())
    if path is not None and not os.path.isfile(path):
        raise click.ClickException(f"no database at {path}")
    if path is not None and os.path.getsize(path) == 0:
        raise click.ClickException(f"{path} is empty: not an autotune database")


def config_option(spec: autotune.KernelSpec, text: str, option: str) -> dict:
    """A config given as a JSON object on the command line, keys left out taken from the default, validated."""
    try:
        return spec.space.config_from_json(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def emit(rows: list[dict], fmt: str) -> None:
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
