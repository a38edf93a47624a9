"""`autotune query KERNEL --gpu X` where X has no rows says which GPUs do (for that kernel), not just "no rows"."""

import json

from click.testing import CliRunner
from stored_rows import store_best

import autotune.kernels.vector_add.add as vector_add
from autotune import gpu
from autotune.cli import main


def test_a_gpu_without_rows_is_told_which_gpus_have_them(user_db):
    store_best(user_db, vector_add.SPEC, "n=4096", vector_add.SPACE.default)
    result = CliRunner().invoke(main, ["query", "vector_add", "--gpu", "A100"])
    assert result.exit_code == 0, result.output
    # this machine's row from the user database, and the shipped database's H100 rows
    assert result.stdout.startswith("no rows of vector_add for A100; GPUs with rows: "), result.stdout
    assert gpu.CPU_INTERPRETER in result.stdout and "H100" in result.stdout, result.stdout


def test_in_json_stdout_stays_an_empty_list_and_the_note_goes_to_stderr(user_db):
    store_best(user_db, vector_add.SPEC, "n=4096", vector_add.SPACE.default)
    result = CliRunner().invoke(
        main, ["query", "vector_add", "--gpu", "A100", "--db", str(user_db), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []
    assert f"GPUs with rows: {gpu.CPU_INTERPRETER} (pass one as --gpu)" in result.stderr, result.stderr


def test_no_gpu_at_all_says_so(user_db):
    store_best(user_db, vector_add.SPEC, "n=4096", vector_add.SPACE.default, dtype="fp32")
    result = CliRunner().invoke(main, ["query", "vector_add", "--gpu", "A100", "--dtype", "fp16", "--db", str(user_db)])
    assert result.exit_code == 0, result.output
    assert "no rows of vector_add fp16 for A100, nor for any other GPU" in result.stdout, result.stdout
