"""`db merge` checks every row of every file against its kernel before it writes anything, and writes all the
files' rows in one transaction: one bad row, or one file it cannot read, and the target is left as it was."""

import json

import database_files
import pytest
from click.testing import CliRunner
from wrong_kernels import TAIL_BUG_ADD

from autotune import db
from autotune.cli import main
from autotune.db import ConfigStore, MergeError
from autotune.ship import merge

FAST = {"BLOCK_SIZE": 512, "num_warps": 4, "num_stages": 1}


def _rows(path) -> dict:
    with ConfigStore(str(path), readonly=True) as store:
        return {(r.kernel, r.bucket): (json.loads(r.config_json), r.time_ms) for r in store.best_rows()}


@pytest.fixture
def target(tmp_path):
    return database_files.valid(tmp_path / "target.sqlite")  # vector_add n=8192: STORED at 1.0 ms


@pytest.mark.parametrize(
    "config, why",
    [
        ({**FAST, "BLOCK_SIZE": 2**40}, "BLOCK_SIZE=1099511627776 is not one of"),
        ({**FAST, "num_warps": -4}, "num_warps=-4 is not one of"),
        ({**FAST, "evil": "os.system"}, "unknown parameter(s) ['evil']"),
        ({"BLOCK_SIZE": 512}, "missing parameter(s)"),
        ({**FAST, "BLOCK_SIZE": 128, "num_warps": 16}, "cannot run on its own problem"),  # a constraint rejects it
    ],
)
def test_a_row_outside_the_kernels_space_never_replaces_a_valid_one(config, why, target, tmp_path):
    bad = database_files.exported(tmp_path / "bad.sqlite")
    with database_files.sqlite(bad) as conn:
        conn.execute("UPDATE best_configs SET config = ?, time_ms = 0.001", (json.dumps(config),))
    before = database_files.sha256(target)
    result = CliRunner().invoke(main, ["db", "merge", str(bad), "--db", str(target)])
    assert result.exit_code == 1 and why in result.output and "nothing was" in result.output, result.output
    assert database_files.sha256(target) == before
    assert _rows(target) == {("vector_add", "n=8192"): (database_files.STORED, 1.0)}


def test_a_bad_file_after_a_good_one_and_nothing_is_taken(target, tmp_path):
    good = database_files.exported(tmp_path / "good.sqlite")
    with database_files.sqlite(good) as conn:
        conn.execute("UPDATE best_configs SET config = ?, time_ms = 0.5", (json.dumps(FAST),))
    for kind in ("corrupt", "truncated", "foreign"):
        bad = database_files.make(kind, tmp_path / f"{kind}.sqlite")
        result = CliRunner().invoke(main, ["db", "merge", str(good), str(bad), "--db", str(target)])
        assert result.exit_code == 1 and result.output.startswith("Error: ") and "Traceback" not in result.output
        assert _rows(target) == {("vector_add", "n=8192"): (database_files.STORED, 1.0)}, kind
    result = CliRunner().invoke(main, ["db", "merge", str(good), "--db", str(target)])
    assert result.exit_code == 0 and "1 row(s) read, 1 taken" in result.output
    assert _rows(target) == {("vector_add", "n=8192"): (FAST, 0.5)}


def test_every_file_is_taken_in_one_go(target, tmp_path):
    files = []
    for i, bucket in enumerate(("n=1024", "n=2048")):
        files.append(database_files.valid(tmp_path / f"{i}.sqlite", database_files.row(bucket=bucket, time_ms=0.1)))
    with ConfigStore(str(target)) as store:
        assert merge.merge_files(store, files) == [(1, 1), (1, 1)]
    assert set(_rows(target)) == {("vector_add", b) for b in ("n=8192", "n=1024", "n=2048")}


def test_rows_of_a_kernel_that_is_not_registered_need_it_loaded_by_hand(target, tmp_path):
    theirs = database_files.valid(
        tmp_path / "theirs.sqlite",
        database_files.row(
            kernel=TAIL_BUG_ADD.name, source_hash=TAIL_BUG_ADD.source_hash, config_json=json.dumps(FAST)
        ),
    )
    with pytest.raises(MergeError, match="kernel 'tail_bug_add' is not registered"):
        merge.read_files([theirs])
    result = CliRunner().invoke(
        main, ["db", "merge", str(theirs), "--db", str(target), "--kernel", "wrong_kernels:TAIL_BUG_ADD"]
    )
    assert result.exit_code == 0 and "1 taken" in result.output, result.output
    assert _rows(target)[("tail_bug_add", "n=8192")] == (FAST, 1.0)


def test_every_shipped_row_passes_the_check():
    [(_, rows)] = merge.read_files([db.shipped_path()])  # rows of GPUs and dtypes this machine does not run too
    assert len(rows) > 300
