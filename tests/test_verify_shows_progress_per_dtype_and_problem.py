"""`autotune verify` runs for minutes on a CPU: it shows a bar per dtype that advances per problem checked, and a
line per dtype as it ends, on stderr (the table stays alone on stdout)."""

import re

import torch
from click.testing import CliRunner

import autotune.kernels.vector_add.add as vector_add
from autotune.cli import main
from autotune.gate.verify import verify


def test_verify_hears_each_distinct_problem_as_its_check_ends():
    heard = []
    result = verify(
        vector_add.SPEC,
        vector_add.SPACE.default,
        torch.float32,
        examples=4,
        on_check=lambda problem, failure: heard.append((problem, failure)),
    )
    assert result.passed and len(heard) == result.examples == 4
    assert [p for p, _ in heard] == result.problems and all(f is None for _, f in heard)


def test_cli_verify_shows_a_bar_per_dtype_and_a_line_as_each_dtype_ends():
    result = CliRunner().invoke(main, ["verify", "vector_add", "--dtype", "fp32", "--dtype", "fp16", "--examples", "3"])
    assert result.exit_code == 0, result.output
    for dtype in ("fp32", "fp16"):
        for done in (1, 2, 3):  # one step per problem checked, the problem's shape beside it
            assert re.search(
                rf"vector_add {dtype}: +\d+%\|[^|]*\| {done}/3 \[[^\]]*problem/s, \d+(x\d+)*\]", result.stderr
            ), result.stderr
        assert re.search(rf"vector_add {dtype}: pass, 3 problems checked in [\d.]+ s", result.stderr), result.stderr
    assert result.stdout.startswith("kernel"), result.stdout  # progress never mixes into the table
