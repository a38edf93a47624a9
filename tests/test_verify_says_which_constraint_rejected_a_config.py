"""A config that no drawn problem admits fails verify with the constraint that rejected it, not an empty reason."""

import json

import torch
from click.testing import CliRunner

import autotune.kernels.fused_softmax.softmax as fused_softmax
import autotune.kernels.vector_add.add as vector_add
from autotune.cli import main
from autotune.gate.verify import verify


def test_the_issue_config_names_the_constraints_that_reject_every_problem():
    config = json.dumps({"BLOCK_SIZE": 64, "variant": "single"})  # num_stages 2 (the default's) and 4 warps
    result = CliRunner().invoke(main, ["verify", "softmax", "--config", config, "--dtype", "fp32", "--examples", "5"])
    assert result.exit_code == 1, result.output
    row = result.stdout.splitlines()[2]
    assert "FAIL" in row and "applies to none of the" in row and "on every one" in row, row
    assert "single has no loop to pipeline: num_stages must be 1" in row, row
    assert "idle warps" in row, row  # 64 elements for 4 warps: every constraint that always rejects is named


def test_only_the_constraints_that_reject_every_draw_are_said_to():
    config = fused_softmax.SPACE.with_overrides(variant="single", BLOCK_SIZE=64, num_stages=2, num_warps=2)
    result = verify(fused_softmax.SPEC, config, torch.float32, examples=5)
    assert not result.passed and result.examples == 0 and result.failure is None
    assert result.rejected_by["single has no loop to pipeline: num_stages must be 1"] == result.skipped > 0
    why = result.explain()
    assert why.endswith("on every one: single has no loop to pipeline: num_stages must be 1"), why
    # the block rejects most draws too, but not all of them: not blamed as the constraint that always rejects
    assert sum("single needs BLOCK_SIZE" in reason for reason in result.rejected_by) == 1


def test_a_passing_config_explains_nothing_and_a_failing_one_gives_its_problem():
    assert verify(vector_add.SPEC, vector_add.SPACE.default, torch.float32, examples=2).explain() == ""
