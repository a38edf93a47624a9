"""A search whose results could not be kept (a database it cannot write, one held in memory) is refused before
its first trial, not after the whole study at its first write, nor reported as stored."""

import os
import shutil
import subprocess
import sys

import database_files
import pytest
import torch
from click.testing import CliRunner

import autotune.kernels.vector_add.add as vector_add
from autotune.cli import main
from autotune.db import ConfigStore, StoreError
from autotune.engine.distributed import search_parallel
from autotune.engine.plan import SearchOptions
from autotune.engine.search import search

PROBLEM = vector_add.parse_shape("1000")


def _without_root_override() -> list[str]:
    """A command prefix under which file permissions hold: root ignores them unless it drops the capability."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only file cannot be made here")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def test_search_on_a_read_only_file_stops_before_its_first_trial(tmp_path):
    path = database_files.exported(tmp_path / "shipped.sqlite")
    path.chmod(0o444)
    before = database_files.sha256(path)
    run = subprocess.run(
        [
            *_without_root_override(),
            sys.executable,
            "-m",
            "autotune",
            "search",
            "vector_add",
            "--shape",
            "1000",
            "--trials",
            "3",
            "--examples",
            "2",
            "--db",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines()[-1] == f"Error: cannot open {path} for writing: attempt to write a readonly database"
    assert "Traceback" not in run.stderr and "evaluated" not in run.stderr and run.stdout == ""
    assert database_files.sha256(path) == before


@pytest.mark.parametrize(
    "url, why",
    [
        ("sqlite:///{path}?mode=ro&uri=true", "for writing: attempt to write a readonly database"),
        ("sqlite:///:memory:", "held in memory and lost when the command ends"),
        ("sqlite://", "held in memory and lost when the command ends"),
    ],
)
def test_search_is_refused_a_store_it_cannot_keep(url, why, tmp_path):
    path = database_files.exported(tmp_path / "configs.sqlite")
    url = url.format(path=f"file:{path}")
    result = CliRunner().invoke(main, ["search", "vector_add", "--shape", "1000", "--trials", "3", "--db", url])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output.splitlines()[-1].startswith("Error: ") and why in result.output, result.output
    assert "evaluated" not in result.output


def test_the_library_refuses_them_too(tmp_path):
    path = database_files.exported(tmp_path / "configs.sqlite")
    with ConfigStore(str(path), readonly=True) as store, pytest.raises(ValueError, match="opened read-only"):
        search(vector_add.SPEC, PROBLEM, torch.float32, SearchOptions(trials=2), store=store)
    with ConfigStore("sqlite:///:memory:") as store:
        with pytest.raises(ValueError, match="held in memory"):
            search(vector_add.SPEC, PROBLEM, torch.float32, SearchOptions(trials=2), store=store)
        with pytest.raises(ValueError, match="held in memory"):
            search_parallel(vector_add.SPEC, [(PROBLEM, torch.float32)], SearchOptions(trials=2), store=store)
    with pytest.raises(StoreError, match="for writing"):
        ConfigStore(f"sqlite:///file:{path}?mode=ro&uri=true")
