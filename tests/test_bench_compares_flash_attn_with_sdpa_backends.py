"""`autotune bench flash_attn --against sdpa-...`: torch's scaled_dot_product_attention with each backend forced (or
none) timed beside flash_attn in one run, forward or (`--backward`) forward + backward, in TFLOP/s as FlashAttention
counts them (GB/s for a decode step); a backend that refuses a case is an `unsupported` cell with torch's reason; a
peer that does not apply to the kernels named is refused. On the CPU: sdpa's math and default paths (and torch's CPU
flash kernel) run, cuDNN and the memory-efficient kernel are CUDA only."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import autotune
from autotune.cli import main
from autotune.gate.compare import compare, compare_outputs
from autotune.measure import against, attention_peers, peers

pytestmark = [pytest.mark.usefixtures("user_db"), pytest.mark.filterwarnings("ignore::UserWarning")]

PREFILL, DECODE = "1x4/2x40x32+causal", "1x2/1x1:300x32"
CPU = torch.device("cpu")


def bench(*args: str):
    return CliRunner().invoke(main, ["bench", *args])


def table_rows(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))) for line in lines[2:]]


def test_sdpa_backends_are_timed_beside_flash_attn_with_rates_ratios_and_unsupported_cells(tmp_path):
    result = bench(
        "flash_attn",
        "vector_add",
        "--shape",
        f"flash_attn={PREFILL}",
        "--shape",
        f"flash_attn={DECODE}",
        "--shape",
        "vector_add=3000",
        "--against",
        "sdpa-default,sdpa-math,sdpa-cudnn",
        "--out",
        str(tmp_path / "run"),
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    printed = {row["shape"]: row for row in table_rows(result.stdout)}
    prefill, decode, add = printed[PREFILL], printed[DECODE], printed["3000"]
    for row in (prefill, decode):
        for peer in ("sdpa-default", "sdpa-math"):
            assert float(row[f"{peer} ms"]) > 0 and float(row[f"{peer} rate"]) > 0
            assert float(row[f"vs {peer}"]) == pytest.approx(
                float(row[f"{peer} ms"]) / float(row["tuned ms"]), rel=2e-3
            )
        assert row["sdpa-cudnn ms"] == "unsupported" and "vs sdpa-cudnn" not in row  # no ratio: an empty column
    assert prefill["unit"] == "TFLOP/s" and decode["unit"] == "GB/s"
    assert add["sdpa-math ms"] == "" and add["unit"] == "GB/s"  # no sdpa for vector_add: an empty cell, no error
    assert (
        f"flash_attn fp32 {PREFILL} sdpa-cudnn unsupported: torch has no cuDNN attention kernel on cpu" in result.stdout
    )
    assert "sdpa-X: torch's scaled_dot_product_attention with its X backend forced" in result.stdout

    out = json.loads((tmp_path / "run.json").read_text())
    spec = autotune.get("flash_attn")
    for r in out["records"]:
        if r["kernel"] != "flash_attn" or r["impl"] == "sdpa-cudnn":
            continue
        b, h, nq, nk, d = (r["problem"][k] for k in ("batch", "heads", "nq", "nk", "head_dim"))
        flops = 4 * b * h * nq * nk * d * (0.5 if r["problem"]["causal"] else 1)
        assert r["flops"] == flops == spec.cost(r["problem"], torch.float32).flops
        if nq == 1:  # decode: the bytes' rate
            assert r["bound"] == "memory" and r["gbs"] == pytest.approx(r["bytes"] / r["median_ms"] / 1e6)
        else:
            assert r["bound"] == "compute" and r["tflops"] == pytest.approx(flops / r["median_ms"] / 1e9)
    (cudnn,) = [r for r in out["records"] if r["impl"] == "sdpa-cudnn" and r["shape"] == PREFILL]
    assert cudnn["median_ms"] is None and "CUDA only" in cudnn["unsupported"] and "error" not in cudnn


def test_backward_times_sdpas_training_step_at_three_and_a_half_times_the_forwards_flops():
    result = bench(
        "flash_attn", "--backward", "--shape", "1x2x16x16+causal", "--against", "sdpa-default", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    (row,) = out["rows"]
    assert row["pass"] == "forward+backward" and row["sdpa-default ms"] > 0 and row["vs sdpa-default"] > 0
    forward = autotune.get("flash_attn").cost(out["records"][0]["problem"], torch.float32).flops
    assert {r["flops"] for r in out["records"]} == {3.5 * forward}


@pytest.mark.parametrize(
    ("kernels", "peer", "names"),
    [
        (["softmax"], "sdpa-flash", ["softmax's: default, torch, compile, liger, copy"]),
        (["flash_attn"], "liger", ["flash_attn's: default, torch, compile, copy, sdpa-flash", "sdpa-default"]),
        (["flash_attn_backward"], "sdpa-cudnn", ["autotune bench flash_attn --backward"]),
    ],
)
def test_a_peer_that_does_not_apply_to_the_kernel_is_a_usage_error_naming_its_peers(kernels, peer, names):
    result = bench(*kernels, "--against", f"torch,{peer}")
    assert result.exit_code == 2, result.output
    assert "--against" in result.output and f"{peer}: not a peer of {kernels[0]}" in result.output
    assert all(name in result.output for name in names)
    assert "Traceback" not in result.output and "[1/" not in result.output  # refused before measuring


def test_a_peer_that_applies_to_some_of_the_kernels_is_accepted():
    assert against.parse_against("sdpa-flash,torch", ["softmax", "flash_attn"]) == ["torch", "sdpa-flash"]
    assert against.allowed("matmul")[:4] == ["default", "torch", "compile", "vendor"]
    with pytest.raises(ValueError, match="not a peer of softmax or layer_norm"):
        against.parse_against("sdpa-math", ["softmax", "layer_norm"])


def test_a_backend_that_refuses_the_inputs_is_unsupported_with_torchs_reason():
    inputs = {
        "q": torch.randn(1, 2, 4, 16),
        "k": torch.randn(1, 2, 4, 16),
        "v": torch.randn(1, 2, 4, 8),
        "is_causal": False,
        "scale": 0.25,
        "enable_gqa": False,
    }
    with pytest.raises(peers.PeerUnavailable, match="Flash attention requires q,k,v to have the same last dimension"):
        attention_peers.sdpa_call("sdpa-flash", inputs)
    assert attention_peers.sdpa_call("sdpa-math", inputs)().shape == (1, 2, 4, 8)  # math runs it
    with pytest.raises(peers.PeerUnavailable, match="no memory-efficient attention kernel on cpu"):
        attention_peers.sdpa_call("sdpa-efficient", inputs)


@pytest.mark.parametrize("shape", ["1x4/2x40x32+causal", "2x2/1x3:70x16", "1x2x33:20x8+causal"])
@pytest.mark.parametrize("peer", ["sdpa-flash", "sdpa-math", "sdpa-default"])
def test_each_sdpa_peer_computes_what_flash_attn_does_within_the_gates_budget(peer, shape):
    # GQA by enable_gqa, causal top-left with Nq != Nk, flash_attn's scale: a mapping that dropped one would fail here.
    forward = autotune.get("flash_attn")
    problem = forward.parse_shape(shape)
    inputs = forward.make_inputs(problem, torch.float32, CPU, 0)
    (ref, _), (base, _), (floor, _) = forward.reference(inputs), forward.baseline(inputs), forward.error_floor(inputs)
    for out in (forward.public(inputs), attention_peers.sdpa_call(peer, inputs)()):
        err, budget, reason = compare(out, ref, base, torch.float32, floor)
        assert reason is None, (err, budget, reason)

    backward = autotune.get("flash_attn_backward")
    inputs = backward.make_inputs(problem, torch.float32, CPU, 0)
    leaves = {n: inputs[n].detach().requires_grad_() for n in ("q", "k", "v")}
    o = attention_peers.sdpa_function(peer, inputs)({**inputs, **leaves})
    theirs = torch.autograd.grad(o, list(leaves.values()), inputs["do"])
    ref, base = backward.reference(inputs), backward.baseline(inputs)
    for grads in (backward.public(inputs), theirs):
        assert compare_outputs(tuple(grads), ref, base)[2] is None


def test_the_timed_training_step_gives_flash_attns_gradients():
    spec = autotune.get("flash_attn")
    inputs = spec.make_inputs(spec.parse_shape("1x4/2x24x16+causal"), torch.float32, CPU, 0)
    ours = peers.training_step(spec.public, inputs)()
    for peer in ("sdpa-math", "sdpa-default"):
        theirs = attention_peers.sdpa_call(peer, inputs, backward=True)()
        assert len(theirs) == 3
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
