"""A row's kernel is a name, never code: `db verify` (and `db merge`) skip or refuse a row whose kernel is not
registered without importing the module its text names, and a module:attr path typed on the command line
loads a KernelSpec but never calls anything else."""

import sys

import database_files
import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.runtime import registry

CANARY = """
import pathlib
pathlib.Path({mark!r}, "imported").touch()

def make():
    pathlib.Path({mark!r}, "called").touch()
"""


@pytest.fixture
def canary(tmp_path, monkeypatch):
    """A module that leaves a file behind when it is imported, and another when its `make` is called."""
    (tmp_path / "autotune_canary.py").write_text(CANARY.format(mark=str(tmp_path)))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("autotune_canary", None)


def test_db_verify_skips_a_row_of_an_unregistered_kernel_without_importing_it(canary, tmp_path):
    path = database_files.valid(tmp_path / "merged.sqlite", database_files.row(kernel="autotune_canary:make"))
    result = CliRunner().invoke(main, ["db", "verify", "--db", str(path), "--examples", "2"])
    assert result.exit_code == 0, result.output
    assert "skipped" in result.output and "'autotune_canary:make' is not registered" in result.output
    assert not (canary / "imported").exists() and "autotune_canary" not in sys.modules


def test_db_merge_refuses_it_without_importing_it(canary, tmp_path):
    path = database_files.valid(tmp_path / "merged.sqlite", database_files.row(kernel="autotune_canary:make"))
    result = CliRunner().invoke(main, ["db", "merge", str(path), "--db", str(tmp_path / "target.sqlite")])
    assert result.exit_code == 1 and "'autotune_canary:make' is not registered" in result.output
    assert not (canary / "imported").exists()


def test_a_path_typed_by_the_user_that_names_no_kernel_spec_is_never_called(canary):
    with pytest.raises(registry.UnknownKernel, match="is a function, not a KernelSpec"):
        registry.get("autotune_canary:make")
    assert (canary / "imported").exists() and not (canary / "called").exists()
