"""benchmarks/hopper_attention_probe.py, the H100 probe of the Gluon attention forward: without a GPU it still runs
to its report, saying why no config ran; its check of a config's outputs against float64 passes a right kernel and
catches a wrong one (a right kernel stood in by flash_attn's own forward, on this CPU)."""

import json
import subprocess
import sys

import pytest
import torch

from autotune.kernels.attention import flash_attn as flash_attn_module
from autotune.kernels.attention import hopper_forward

SHAPES = ["1x2x64x64", "1x2x64x64+causal"]
pytestmark = pytest.mark.filterwarnings("ignore::autotune.runtime.NoTunedConfigsWarning")  # flash_attn's, here


def test_without_a_gpu_the_probe_reports_why_no_config_ran(tmp_path):
    out = tmp_path / "probe"
    args = [sys.executable, "benchmarks/hopper_attention_probe.py", "--quick", "--out", str(out)]
    subprocess.run(args + [a for s in SHAPES for a in ("--shape", s)], check=True, timeout=600)
    result = json.loads((tmp_path / "probe.json").read_text())
    assert [c["status"] for c in result["configs"]] == [
        "unsupported: q is on the cpu: the kernel needs a Hopper GPU (sm_90)"
    ] * 3
    for shape in SHAPES:
        assert result["baselines"][shape]["flash_attn"]["tflops"] > 0
        assert "CUDA only" in result["baselines"][shape]["sdpa-cudnn"]["unsupported"]
    assert "| m64n128s2c2ppr240 | unsupported: q is on the cpu" in (tmp_path / "probe.md").read_text()


@pytest.fixture
def stand_in_kernel(monkeypatch):
    """hopper_forward's entry points replaced by flash_attn's forward (times `factor`), as if this were an H100."""

    def install(factor: float):
        def forward(q, k, v, causal, scale, config):
            o, lse = flash_attn_module.forward(q, k, v, causal, scale)
            return o * factor, lse

        def launch(q, k, v, o, lse, causal, scale, config):
            o_, lse_ = forward(q, k, v, causal, scale, config)
            o.copy_(o_)
            lse.copy_(lse_)

        monkeypatch.setattr(hopper_forward, "supported", lambda *args: None)
        monkeypatch.setattr(hopper_forward, "hopper_attention_forward", forward)
        monkeypatch.setattr(hopper_forward, "launch", launch)

    return install


def _child(probe, capsys, config) -> dict:
    presets = [probe.problems_.parse_shape(s) for s in SHAPES]
    probe.child(config, torch.bfloat16, presets)
    return probe.outcome(config, capsys.readouterr().out, "", 0)


def test_a_right_kernel_passes_every_check_and_is_timed(benchmark_script, stand_in_kernel, capsys):
    probe = benchmark_script("hopper_attention_probe")
    stand_in_kernel(1.0)
    result = _child(probe, capsys, probe.QUICK[0])
    assert result["status"] == "ok"
    shapes = {c["shape"] for c in result["checks"]}
    assert {"1x2x64x64", "1x2x64x64+causal", "2x4/1x77:5x64+causal", "1x2x129:1000x64+causal magnitude 8.0"} <= shapes
    assert set(result["times"]) == set(SHAPES) and all(t["tflops"] > 0 for t in result["times"].values())


def test_a_wrong_kernel_is_reported_wrong_with_its_first_failure(benchmark_script, stand_in_kernel, capsys):
    probe = benchmark_script("hopper_attention_probe")
    stand_in_kernel(1.1)  # ten percent off: past the gate's budget for bfloat16 (about 4x torch's own error)
    result = _child(probe, capsys, probe.QUICK[0])
    assert result["status"].startswith(f"wrong on {len(result['checks'])} of {len(result['checks'])} checks, first ")
    assert "output 0: error" in result["status"]
