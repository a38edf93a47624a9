"""gated_mlp_backward (the gated MLP backward's elementwise step, dg = dh * u * act'(g) and du = dh * act(g)) is a
kernel of its own: `autotune verify` passes its default and a given config against float64 and fails a launch that
leaves the activation out; `autotune search` stores a verified row for the interpreter preset, and gated_mlp's
backward then launches that config."""

from __future__ import annotations

import dataclasses
import json

import torch
import torch.nn.functional as F
from click.testing import CliRunner

import autotune
from autotune import gpu, runtime
from autotune.cli import main
from autotune.gate.verify import verify
from autotune.kernels import gated_mlp


def test_verify_passes_the_default_and_a_small_block():
    for args in (["--dtype", "fp32"], ["--dtype", "fp16", "--config", json.dumps({"BLOCK": 16, "num_warps": 1})]):
        result = CliRunner().invoke(main, ["verify", "gated_mlp_backward", "--examples", "8", *args])
        assert result.exit_code == 0, result.output
        assert "gated_mlp_backward" in result.output and "pass" in result.output


def test_verify_fails_a_launch_that_leaves_the_activation_out():
    spec = autotune.get("gated_mlp_backward")

    def ungated(inputs, config, out):  # dg = dh * u and du = dh * g, whatever the activation
        return spec.launch({**inputs, "activation": "none"}, config, out)

    wrong = dataclasses.replace(spec, name="gated_mlp_backward_wrong", launch=ungated, _hash=[])
    result = verify(wrong, spec.space.default, torch.float32, examples=8)
    assert not result.passed and result.failure.kind == "incorrect"


def test_search_stores_a_row_that_the_gated_backward_launches(user_db):
    cli = CliRunner()
    result = cli.invoke(
        main, "search gated_mlp_backward --dtype fp32 --trials 4 --examples 2 --final-examples 2".split()
    )
    assert result.exit_code == 0, result.output
    listing = cli.invoke(main, ["query", "gated_mlp_backward", "--format", "json", "--gpu", gpu.CPU_INTERPRETER])
    rows = json.loads(listing.output)
    assert len(rows) == 1 and rows[0]["bucket"] == "m=64,h=128" and rows[0]["current"] is True
    assert rows[0]["torch_ms"] is not None  # torch's step, timed beside it: the routing's evidence
    stored = json.loads(rows[0]["config"])
    runtime.clear_cache()
    spec = autotune.get("gated_mlp_backward")
    choice = runtime.tuned(spec).resolve(torch.float32, "m=64,h=128", {"m": 33, "h": 72})
    assert choice.source == "exact" and choice.config == stored
    gen = torch.Generator().manual_seed(0)
    x, wg, wu, wd = (torch.randn(*s, generator=gen) for s in ((33, 40), (72, 40), (72, 40), (24, 72)))  # the preset
    leaves = [t.clone().requires_grad_() for t in (x, wg, wu, wd)]
    with runtime.record_launches() as launches:
        gated_mlp(*leaves).sum().backward()
    assert ("gated_mlp_backward", stored) in launches
    torch_leaves = [t.clone().requires_grad_() for t in (x, wg, wu, wd)]
    tx, twg, twu, twd = torch_leaves
    F.linear(F.silu(F.linear(tx, twg)) * F.linear(tx, twu), twd).sum().backward()
    for ours, theirs in zip(leaves, torch_leaves):
        torch.testing.assert_close(ours.grad, theirs.grad, atol=1e-4, rtol=1e-4)
