"""`autotune db verify` re-checks stored rows on a fresh seed, keeps the outcome on each row, and a row
that fails is flagged: the runtime stops serving it and falls back to the nearest bucket or the default."""

import json
import math

import pytest
import torch
from click.testing import CliRunner
from stored_rows import store_best
from wrong_kernels import BAD_BLOCK, TAIL_BUG_ADD, tail_bug_add

import autotune.kernels.vector_add.add as vector_add
from autotune import gpu, runtime
from autotune.cli import main
from autotune.db import ConfigStore
from autotune.engine.warm_starts import warm_starts
from autotune.identity import RowKey
from autotune.measure.reverify import reverify_rows
from autotune.spec import DTYPE_NAMES

RIGHT = {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1}
WRONG = {"BLOCK_SIZE": BAD_BLOCK, "num_warps": 4, "num_stages": 1}  # wrong whenever the last block is partial
KERNEL = ["--kernel", "wrong_kernels:TAIL_BUG_ADD"]


def _store_right_and_wrong(db_path) -> None:
    store_best(db_path, TAIL_BUG_ADD, "n=8192", RIGHT, problem=vector_add.parse_shape("5000"))
    store_best(db_path, TAIL_BUG_ADD, "n=16384", WRONG, problem=vector_add.parse_shape("10000"))


def _launch(n: int) -> tuple[dict, bool]:
    """The config the runtime launched for an n-element call, and whether the sum came out right."""
    x, y = torch.randn(n), torch.randn(n)
    with runtime.record_launches() as launches:
        out = tail_bug_add(x, y)
    assert len(launches) == 1
    return launches[0][1], torch.equal(out, x + y)


def _rows(db_path) -> dict:
    with ConfigStore(str(db_path)) as store:
        return {r.bucket: r for r in store.best_rows(kernel=TAIL_BUG_ADD.name)}


@pytest.mark.filterwarnings("ignore::autotune.runtime.StoredConfigWarning")  # the older source's row, on every load
def test_the_right_row_passes_the_wrong_one_is_flagged_with_its_example_and_no_longer_served(user_db):
    _store_right_and_wrong(user_db)
    store_best(user_db, TAIL_BUG_ADD, "n=4096", RIGHT, source_hash="0" * 16)  # an older source's row
    assert _launch(10000) == (WRONG, False)  # before: the runtime serves the wrong row, and the sum is wrong

    run = CliRunner().invoke(main, ["db", "verify", *KERNEL, "--examples", "20", "--seed", "2", "--format", "json"])
    assert run.exit_code == 1, run.output
    table = {r["bucket"]: r for r in json.loads(run.stdout)}
    assert table["n=8192"]["result"] == "pass" and table["n=8192"]["examples"] >= 20
    assert (
        table["n=16384"]["result"] == "FAIL" and '"shape"' in table["n=16384"]["minimal failing problem / why skipped"]
    )
    assert (
        table["n=4096"]["result"] == "skipped"
        and "another source" in table["n=4096"]["minimal failing problem / why skipped"]
    )
    assert "seed 2" in run.stderr and "1 pass, 1 FAIL" in run.stderr

    rows = _rows(user_db)
    good, bad, stale = rows["n=8192"], rows["n=16384"], rows["n=4096"]
    assert (good.verify_passed, good.verify_seed, good.flagged) == (True, 2, False) and good.verify_failure is None
    assert good.verify_examples >= 20 and good.verified_at is not None
    assert bad.flagged and bad.verify_seed == 2 and bad.verify_failure["kind"] == "incorrect"
    numel = math.prod(bad.verify_failure["problem"]["shape"])
    assert BAD_BLOCK < numel < 2 * BAD_BLOCK  # the shrunk example: just past one block
    assert stale.verified_at is None and not stale.flagged
    assert (bad.config, bad.time_ms) == (WRONG, 1.0)  # the evidence itself is untouched

    runtime.clear_cache()  # as a fresh process would start
    assert _launch(10000) == (RIGHT, True)  # after: the nearest bucket's row
    assert runtime.tuned(TAIL_BUG_ADD).choice(torch.float32, "n=16384").source == "nearest"

    shown = CliRunner().invoke(main, ["query", "wrong_kernels:TAIL_BUG_ADD"])
    verified = {line.split()[2]: line for line in shown.output.splitlines() if line.startswith(gpu.current_gpu().name)}
    assert "FAIL" in verified["n=16384"] and "pass" in verified["n=8192"] and "not yet" in verified["n=4096"]


def test_a_flagged_row_is_no_warm_start_and_its_bucket_falls_back_to_the_default_when_it_is_alone(user_db):
    store_best(user_db, TAIL_BUG_ADD, "n=16384", WRONG, problem=vector_add.parse_shape("10000"))
    assert _launch(10000) == (WRONG, False)
    with ConfigStore(str(user_db)) as store:
        reverify_rows(store, kernels=[TAIL_BUG_ADD], examples=10, seed=2)
        assert warm_starts(
            TAIL_BUG_ADD,
            store,
            RowKey(
                TAIL_BUG_ADD.name,
                TAIL_BUG_ADD.source_hash,
                gpu.current_gpu().name,
                DTYPE_NAMES[torch.float32],
                "n=16384",
            ),
        ) == [TAIL_BUG_ADD.space.default]
    assert _launch(10000) == (TAIL_BUG_ADD.space.default, True)  # this process stopped serving it at once


def test_each_row_is_recorded_as_it_finishes_so_an_interrupted_run_keeps_it(user_db):
    for bucket, n in (("n=16384", "10000"), ("n=8192", "5000")):
        store_best(user_db, TAIL_BUG_ADD, bucket, RIGHT, problem=vector_add.parse_shape(n))

    def interrupt(verdict, done, total):
        assert total == 2
        raise KeyboardInterrupt

    with ConfigStore(str(user_db)) as store, pytest.raises(KeyboardInterrupt):
        reverify_rows(store, kernels=[TAIL_BUG_ADD], examples=10, seed=5, on_row=interrupt)
    rows = _rows(user_db)
    first, second = rows["n=16384"], rows["n=8192"]  # rows come ordered by bucket key
    assert first.verify_passed and first.verify_seed == 5
    assert second.verified_at is None


def test_an_interrupted_run_is_finished_with_unverified_only(user_db):
    test_each_row_is_recorded_as_it_finishes_so_an_interrupted_run_keeps_it(user_db)
    run = CliRunner().invoke(
        main, ["db", "verify", *KERNEL, "--unverified", "--examples", "10", "--seed", "6", "--format", "json"]
    )
    assert run.exit_code == 0, run.output
    assert [r["bucket"] for r in json.loads(run.stdout)] == ["n=8192"]  # the row the first run did not reach
    rows = _rows(user_db)
    assert (rows["n=16384"].verify_seed, rows["n=8192"].verify_seed) == (5, 6)


def test_verification_of_another_gpu_is_refused_before_anything_runs(user_db):
    _store_right_and_wrong(user_db)
    run = CliRunner().invoke(main, ["db", "verify", "--gpu", "H100", *KERNEL])
    assert run.exit_code != 0 and "verification runs the kernels here" in run.output and "Traceback" not in run.output
    assert all(r.verified_at is None for r in _rows(user_db).values())
    missing = CliRunner().invoke(main, ["db", "verify", "--db", str(user_db.parent / "none.sqlite")])
    assert missing.exit_code != 0 and "no database at" in missing.output
    with ConfigStore(str(user_db)) as store:
        with pytest.raises(gpu.GPUMismatchError, match="this machine's device is"):
            reverify_rows(store, gpu_name="H100")
        with pytest.raises(ValueError, match="examples must be a positive int"):
            reverify_rows(store, examples=0)


def test_compiling_each_row_ahead_in_a_pool_changes_no_verdict(user_db, tmp_path):
    """db verify builds each row's config for all the problems it will check, in worker processes, first
    (on a GPU that is most of a row's time); the verdicts are those of checking without it (on a copy of
    the rows: a second run on the same ones would check the first run's failure first)."""
    inline_db = tmp_path / "inline.sqlite"
    _store_right_and_wrong(user_db)
    _store_right_and_wrong(inline_db)
    with ConfigStore(str(user_db)) as store:
        ahead = reverify_rows(store, kernels=[TAIL_BUG_ADD], examples=10, seed=2, compile_workers=2)
    with ConfigStore(str(inline_db)) as store:
        inline = reverify_rows(store, kernels=[TAIL_BUG_ADD], examples=10, seed=2, compile_workers=0)
    verdicts = {v.bucket: (v.result, v.examples, v.detail) for v in ahead.rows}
    assert verdicts == {v.bucket: (v.result, v.examples, v.detail) for v in inline.rows}
    assert {b: v[0] for b, v in verdicts.items()} == {"n=8192": "pass", "n=16384": "FAIL"}
    assert [v.compiled_ahead for v in ahead.rows] == [True, True]
    assert not any(v.compiled_ahead for v in inline.rows)
    with ConfigStore(str(user_db)) as store, pytest.raises(ValueError, match="compile_workers"):
        reverify_rows(store, compile_workers=-1)
