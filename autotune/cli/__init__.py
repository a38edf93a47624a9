"""The `autotune` command: parse options, call the library, print the result. One module per group of commands;
importing them registers their commands on `main`."""

from autotune.cli import db, inspect, tune  # noqa: F401  (registers the commands)
from autotune.cli.app import main

__all__ = ["main"]
