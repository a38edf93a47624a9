"""`autotune verify gated_mlp` passes its default and a given config; `autotune search gated_mlp` tunes the
interpreter preset, stores the best verified row, and the public function then launches that config."""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from click.testing import CliRunner

from autotune import gpu, runtime
from autotune.cli import main
from autotune.kernels import gated_mlp


def test_verify_passes_the_default_and_a_descriptor_config():
    tma = json.dumps({"variant": "tma", "BLOCK_M": 32, "BLOCK_N": 32, "GROUP_M": 1, "num_warps": 2, "num_stages": 2})
    for args in (["--dtype", "fp32"], ["--dtype", "fp16", "--config", tma]):
        result = CliRunner().invoke(main, ["verify", "gated_mlp", "--examples", "4", *args])
        assert result.exit_code == 0, result.output
        assert "gated_mlp" in result.output and "pass" in result.output


def test_search_stores_a_row_that_the_public_function_launches(user_db):
    cli = CliRunner()
    result = cli.invoke(
        main, ["search", "gated_mlp", "--dtype", "fp32", "--trials", "3", "--examples", "2", "--final-examples", "2"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(cli.invoke(main, ["query", "gated_mlp", "--format", "json", "--gpu", gpu.CPU_INTERPRETER]).output)
    assert len(rows) == 1 and rows[0]["bucket"] == "m=64,k=64,h=128,n=32" and rows[0]["current"] is True
    stored = json.loads(rows[0]["config"])
    runtime.clear_cache()
    x, wg, wu, wd = torch.randn(33, 40), torch.randn(72, 40), torch.randn(72, 40), torch.randn(24, 72)  # the preset
    with runtime.record_launches() as launches:
        y = gated_mlp(x, wg, wu, wd)
    assert launches[0] == ("gated_mlp", stored)
    torch.testing.assert_close(y, F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd), atol=1e-4, rtol=1e-4)
