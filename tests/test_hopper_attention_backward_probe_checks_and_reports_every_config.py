"""benchmarks/hopper_attention_backward_probe.py, the H100 probe of the Gluon attention backward: without a GPU it
still runs to its report, saying why no config ran; its check of a config's gradients against float64 passes a
right kernel and catches a wrong one, and it times the backward alone and forward + backward (a right kernel stood
in by flash_attn's own forward and backward, on this CPU)."""

import json
import subprocess
import sys

import pytest
import torch

from autotune.kernels.attention import flash_attn as flash_attn_module
from autotune.kernels.attention import flash_attn_backward, hopper_backward, hopper_forward

SHAPES = ["1x2x64x64", "1x2x64x64+causal"]
pytestmark = pytest.mark.filterwarnings("ignore::autotune.runtime.NoTunedConfigsWarning")  # flash_attn's, here


def test_without_a_gpu_the_probe_reports_why_no_config_ran(tmp_path):
    out = tmp_path / "probe"
    args = [sys.executable, "benchmarks/hopper_attention_backward_probe.py", "--quick", "--out", str(out)]
    subprocess.run(args + [a for s in SHAPES for a in ("--shape", s)], check=True, timeout=600)
    result = json.loads((tmp_path / "probe.json").read_text())
    assert [c["status"] for c in result["configs"]] == [
        "unsupported: q is on the cpu: the kernel needs a Hopper GPU (sm_90)"
    ] * 3
    for shape in SHAPES:
        baselines = result["baselines"][shape]
        assert baselines["flash_attn"]["tflops"] > 0 and baselines["sdpa-default"]["tflops"] > 0
        assert "CUDA only" in baselines["sdpa-cudnn"]["unsupported"]
    rows = [line for line in (tmp_path / "probe.md").read_text().splitlines() if line.startswith("| m64n64")]
    assert len(rows) == 3 and all("| unsupported: q is on the cpu" in row for row in rows)


@pytest.fixture
def stand_in_kernels(monkeypatch):
    """hopper_backward's and hopper_forward's entry points replaced by flash_attn's backward (its gradients times
    `factor`) and forward, as if this were an H100."""

    def install(factor: float):
        def backward(do, q, k, v, o, lse, causal, scale, config):
            return tuple(g * factor for g in flash_attn_backward.backward(do, q, k, v, o, lse, causal, scale))

        def launch(do, q, k, v, o, lse, dq, dk, dv, causal, scale, config):
            for grad, value in zip((dq, dk, dv), backward(do, q, k, v, o, lse, causal, scale, config)):
                grad.copy_(value)

        def forward_launch(q, k, v, o, lse, causal, scale, config):
            o_, lse_ = flash_attn_module.forward(q, k, v, causal, scale)
            o.copy_(o_)
            lse.copy_(lse_)

        monkeypatch.setattr(hopper_backward, "hopper_attention_backward", backward)
        monkeypatch.setattr(hopper_backward, "launch", launch)
        monkeypatch.setattr(hopper_forward, "launch", forward_launch)

    return install


def _child(probe, capsys, config) -> dict:
    presets = [probe.problems_.parse_shape(s) for s in SHAPES]
    probe.child(config, torch.bfloat16, presets)
    return probe.outcome(config, capsys.readouterr().out, "", 0)


def test_a_right_kernel_passes_every_check_and_is_timed(benchmark_script, stand_in_kernels, capsys, monkeypatch):
    probe = benchmark_script("hopper_attention_backward_probe")
    stand_in_kernels(1.0)
    monkeypatch.setattr(probe, "KERNEL_STEPS", 1)  # one profiled call per preset: the interpreter is slow
    result = _child(probe, capsys, probe.QUICK[0])
    assert result["status"] == "ok", result["status"]
    shapes = {c["shape"] for c in result["checks"]}
    assert {
        "1x2x64x64",
        "1x2x64x64+causal",
        "2x4/1x77:5x64+causal",
        "1x2x129:1000x64+causal magnitude 3.0",
        "1x2x1:1021x64 magnitude 0.01",
    } <= shapes
    assert set(result["times"]) == set(SHAPES)
    for times in result["times"].values():
        assert set(times) == {"backward", "forward+backward"} and all(t["tflops"] > 0 for t in times.values())
    # Where the backward's time goes, per op (CPU time under the interpreter, GPU kernels on a GPU).
    assert set(result["kernels"]) == set(SHAPES)
    assert all(rows and all(r["ms"] >= 0 and r["calls"] > 0 for r in rows) for rows in result["kernels"].values())


def test_a_wrong_kernel_is_reported_wrong_with_its_first_failure(
    benchmark_script, stand_in_kernels, capsys, monkeypatch
):
    probe = benchmark_script("hopper_attention_backward_probe")
    stand_in_kernels(2.0)  # twice the gradients (a scale applied twice): past every budget of the gate
    monkeypatch.setattr(probe.bench, "kernel_time", lambda call, **_: (1.0, "stub"))  # its timing is the other test's
    result = _child(probe, capsys, probe.QUICK[0])
    checks = len(result["checks"])
    assert result["status"].startswith(f"wrong on {checks} of {checks} checks, first "), result["status"]
    assert "output 0: error" in result["status"]


def test_the_report_marks_a_wrong_config_and_takes_the_best_right_one(benchmark_script):
    probe = benchmark_script("hopper_attention_backward_probe")
    shape = SHAPES[0]

    def config(label: str, status: str, tflops: float) -> dict:
        times = {shape: {w: {"tflops": tflops * f} for w, f in (("forward+backward", 1.0), ("backward", 0.8))}}
        return {"label": label, "status": status, "checks": [{"ok": status == "ok"}], "times": times, "seconds": 1}

    result = {
        "environment": {"gpu": "H100", "device_name": "x", "torch": "t", "triton": "3.6.0", "date": "d"},
        "dtype": "bf16",
        "presets": [probe.problems_.parse_shape(shape)],
        "baselines": {shape: {"flash_attn": {"tflops": 100.0}, "sdpa-cudnn": {"tflops": 200.0},
                              "sdpa-flash": {"tflops": 150.0}, "sdpa-default": {"unsupported": "no"}}},
        "configs": [config("fast-but-wrong", "wrong on 1 of 1 checks", 400.0), config("right", "ok", 300.0)],
    }  # fmt: skip
    result["configs"][1]["kernels"] = {shape: [{"op": "_attn_bwd_dkdv_kernel", "calls": 1, "ms": 0.25, "share": 0.7}]}
    result["configs"][0]["kernels"] = {shape: [{"op": "wrong_kernel", "calls": 1, "ms": 0.1, "share": 1.0}]}
    markdown = probe.text(result)
    assert f"| {shape} | right    | _attn_bwd_dkdv_kernel |       1 | 0.25 |     0.7 |" in markdown
    assert "wrong_kernel" not in markdown  # the best right config's breakdown only
    row = next(line for line in markdown.splitlines() if line.startswith(f"| {shape} "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5:9] == ["300", "right", "1.5", "2"]  # best gluon, its config, x sdpa-cudnn, x sdpa-flash
    assert cells[9:] == ["400 / 320 wrong", "300 / 240"]
    assert "- sdpa-default at 1x2x64x64: no" in markdown
