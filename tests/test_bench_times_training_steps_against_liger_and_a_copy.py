"""`autotune bench --backward` times forward + backward through autograd (weight, bias and residual gradients
included) for the tuned kernels and each peer; `--against liger` adds Liger-Kernel's op where it is installed and
says so where it is not; `--against copy` adds a device copy of the bytes the kernel must move."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from click.testing import CliRunner

import autotune
from autotune import runtime
from autotune.cli import main
from autotune.measure import peers, report

pytestmark = [pytest.mark.usefixtures("user_db"), pytest.mark.filterwarnings("ignore::UserWarning")]


def bench(*args: str):
    return CliRunner().invoke(main, ["bench", *args])


def test_backward_times_training_steps_of_each_norm_and_softmax_with_a_copy_column():
    with runtime.record_launches() as launches:
        result = bench(
            "softmax",
            "layer_norm",
            "rms_norm",
            "group_norm",
            "--backward",
            "--against",
            "torch,copy",
            "--format",
            "json",
        )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["pass"] == "forward+backward"
    assert [(r["kernel"], r["pass"]) for r in out["rows"]] == [
        (k, "forward+backward") for k in ("softmax", "layer_norm", "rms_norm", "group_norm")
    ]
    for r in out["records"]:
        spec = autotune.get(r["kernel"])
        fwd, bwd = (
            spec.cost(r["problem"], torch.float32),
            autotune.get(r["kernel"] + "_backward").cost(r["problem"], torch.float32),
        )
        assert r["bytes"] == fwd.bytes + bwd.bytes and r["median_ms"] > 0
    for row in out["rows"]:
        assert row["vs copy"] == pytest.approx(row["copy ms"] / row["tuned ms"])
    # Every tuned step ran the forward kernel and the backward kernel of its own.
    ran = {kernel for kernel, _ in launches}
    assert {
        "softmax",
        "softmax_backward",
        "layer_norm",
        "layer_norm_backward",
        "rms_norm",
        "rms_norm_backward",
        "group_norm",
        "group_norm_backward",
    } <= ran


def test_a_training_step_computes_every_inputs_gradient_as_torch_does():
    spec = autotune.get("layer_norm")
    inputs = spec.make_inputs(spec.parse_shape("6x40+res"), torch.float32, torch.device("cpu"), 0)
    ours = peers.training_step(spec.public, inputs)()
    theirs = peers.training_step(peers.torch_function(spec), inputs)()
    assert len(ours) == 4  # x, residual, weight, bias
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_forward_with_a_copy_of_the_bytes_it_moves():
    result = bench("softmax", "--against", "copy", "--shape", "8x300", "--format", "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    (copy,) = [r for r in out["records"] if r["impl"] == "copy"]
    assert copy["bytes"] == autotune.get("softmax").cost(copy["problem"], torch.float32).bytes == 2 * 8 * 300 * 4
    assert "pass" not in out["rows"][0] and out["rows"][0]["vs copy"] > 0


def test_copy_call_moves_the_bytes_asked():
    call = peers.copy_call(1000, torch.device("cpu"))
    dst = call()
    assert dst.numel() == 500 and dst.dtype == torch.uint8


def test_without_liger_kernel_the_column_is_left_out_with_a_note():
    result = bench("softmax", "--against", "torch,liger", "--shape", "8x300")
    assert result.exit_code == 0, result.output
    assert "liger: liger-kernel is not installed (pip install 'autotune[liger]')" in result.stdout
    assert "liger ms" not in result.stdout and "torch ms" in result.stdout


@pytest.fixture
def fake_liger(tmp_path, monkeypatch):
    """A stand-in liger_kernel package on sys.path with the three ops' autograd Functions (torch arithmetic),
    counting their calls, and Liger taken to run here."""
    ops = tmp_path / "liger_kernel" / "ops"
    ops.mkdir(parents=True)
    (tmp_path / "liger_kernel" / "__init__.py").write_text("CALLS = []\n")
    (ops / "__init__.py").write_text("")
    body = {
        "softmax": ("LigerSoftmaxFunction", "x", "torch.softmax(x, -1)"),
        "layer_norm": ("LigerLayerNormFunction", "x, w, b, eps", "F.layer_norm(x, x.shape[-1:], w, b, eps)"),
        "rms_norm": (
            "LigerRMSNormFunction",
            "x, w, eps, offset, casting_mode, in_place",
            "F.rms_norm(x, x.shape[-1:], w + offset, eps)",
        ),
    }
    for module, (name, args, expr) in body.items():
        (ops / f"{module}.py").write_text(
            textwrap.dedent(f"""
            import torch
            import torch.nn.functional as F
            import liger_kernel


            class {name}:
                @staticmethod
                def apply({args}):
                    liger_kernel.CALLS.append("{name}")
                    return {expr}
        """)
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(peers, "_liger_runs_here", lambda: True)
    import liger_kernel

    yield liger_kernel.CALLS
    for name in [m for m in __import__("sys").modules if m.startswith("liger_kernel")]:
        monkeypatch.delitem(__import__("sys").modules, name)


def test_liger_is_timed_where_it_has_the_op_forward_and_backward(fake_liger):
    result = bench(
        "softmax", "layer_norm", "rms_norm", "group_norm", "--backward", "--against", "liger", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    timed = {r["kernel"] for r in out["records"] if r["impl"] == "liger" and r["median_ms"] > 0}
    assert timed == {"softmax", "layer_norm", "rms_norm"}
    assert {"LigerSoftmaxFunction", "LigerLayerNormFunction", "LigerRMSNormFunction"} <= set(fake_liger)
    assert any("group_norm" in s and "no Liger-Kernel op" in s for s in out["skipped"])
    assert all(row["vs liger"] > 0 for row in out["rows"] if row["kernel"] != "group_norm")


def test_liger_gives_what_torch_gives_for_a_norm_with_a_residual(fake_liger):
    spec = autotune.get("rms_norm")
    inputs = spec.make_inputs(spec.parse_shape("5x24+res"), torch.float32, torch.device("cpu"), 0)
    y, h = peers.liger_function("rms_norm", inputs)(inputs)
    ty, th = spec.baseline(inputs)
    torch.testing.assert_close(h, th)
    torch.testing.assert_close(y, ty)
    with pytest.raises(peers.PeerUnavailable, match="last dim only"):
        peers.liger_function("softmax", {"x": torch.randn(3, 4), "dim": 0})


def test_backward_leaves_out_what_launches_one_config_and_refuses_kernels_without_a_backward():
    result = bench("softmax", "--backward", "--against", "default,torch", "--shape", "8x300")
    assert result.exit_code == 0, result.output
    assert "default: not timed forward + backward" in result.stdout and "default ms" not in result.stdout
    refused = bench("vector_add", "--backward")
    assert refused.exit_code != 0 and "vector_add has no backward kernel to time" in refused.output
    assert "Traceback" not in refused.output and "[1/" not in refused.output
    with pytest.raises(ValueError, match="group_norm, layer_norm, rms_norm, rope, softmax"):
        report.backward_spec("matmul")
