"""The runtime and `autotune query` only read: whatever file they are pointed at, autotune's or not, of this
schema or an older one, not one byte of it changes, and nothing is created beside it or on the way to it."""

import json
import os
import warnings

import database_files
import pytest
import torch
from click.testing import CliRunner

from autotune import runtime
from autotune.cli import main
from autotune.kernels import add, layer_norm, softmax


def _call_public_kernels() -> list:
    x = torch.randn(5000)
    rows = torch.randn(3, 40)
    with warnings.catch_warnings(), runtime.record_launches() as launches:
        warnings.simplefilter("ignore")  # a database that is no autotune database is ignored with a warning
        assert torch.equal(add(x, x), x + x)
        torch.testing.assert_close(softmax(rows, dim=-1), torch.softmax(rows, dim=-1))
        torch.testing.assert_close(layer_norm(rows, (40,)), torch.nn.functional.layer_norm(rows, (40,)))
    return launches


@pytest.mark.parametrize("kind", ["foreign", "old_schema", "empty", "valid", "exported"])
def test_kernel_calls_and_query_leave_every_byte_of_the_database_alone(kind, tmp_path, monkeypatch):
    folder = tmp_path / "databases"
    folder.mkdir()
    path = database_files.make(kind, folder / "user.sqlite")
    before, listing = database_files.sha256(path), sorted(os.listdir(folder))
    monkeypatch.setenv("AUTOTUNE_DB", str(path))
    runtime.clear_cache()
    try:
        launches = _call_public_kernels()
    finally:
        runtime.clear_cache()
    served = kind in database_files.SERVED
    assert (launches[0] == ("vector_add", database_files.STORED)) == served, launches

    for args in (["query", "vector_add"], ["query", "vector_add", "--db", str(path), "--format", "json"]):
        result = CliRunner().invoke(main, args)
        if served:
            assert result.exit_code == 0 and json.dumps(database_files.STORED) in result.output.replace('\\"', '"')
        else:
            assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
            assert result.output.startswith("Error: ") and str(path) in result.output

    assert database_files.sha256(path) == before
    if kind != "valid":  # SQLite reads a WAL file (as a search leaves it) through -shm/-wal files beside it
        assert sorted(os.listdir(folder)) == listing


def test_a_database_that_does_not_exist_is_not_created(tmp_path, monkeypatch):
    missing = tmp_path / "typo" / "dir" / "x.sqlite"
    monkeypatch.setenv("AUTOTUNE_DB", str(missing))
    runtime.clear_cache()
    try:
        _call_public_kernels()
    finally:
        runtime.clear_cache()
    result = CliRunner().invoke(main, ["query", "vector_add", "--db", str(missing)])
    assert result.exit_code == 1 and result.output == f"Error: no autotune database at {missing}\n"
    monkeypatch.delenv("AUTOTUNE_DB")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the default database, ~/.cache/autotune/autotune.sqlite
    assert CliRunner().invoke(main, ["query", "vector_add"]).exit_code == 0
    assert sorted(os.listdir(tmp_path)) == []
