"""benchmarks/hopper_gemm_probe.py, the H100 probe of the Gluon Hopper GEMM: without a GPU it still runs to its report,
saying why no config ran; its check of a config's outputs against float64 passes a right kernel in every layout,
plain and gated (with and without [g | u]), and catches a wrong one (a right kernel stood in by torch, on this
CPU)."""

import json
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from autotune.kernels.gemm import hopper_gemm

PLAIN = ["64x32x64:nt", "64x32x64:tn"]
GATED = ["64x32x64+gu"]
pytestmark = pytest.mark.filterwarnings("ignore::autotune.runtime.NoTunedConfigsWarning")  # the tuned kernels', here


def test_without_a_gpu_the_probe_reports_why_no_config_ran(tmp_path):
    out = tmp_path / "probe"
    args = [sys.executable, "benchmarks/hopper_gemm_probe.py", "--quick", "--dtype", "fp16", "--out", str(out)]
    args += [a for s in PLAIN for a in ("--shape", s)] + [a for s in GATED for a in ("--gated-shape", s)]
    subprocess.run(args, check=True, timeout=600)
    result = json.loads((tmp_path / "probe.json").read_text())
    assert [c["status"] for c in result["configs"]] == [
        "unsupported: a is on the cpu: the kernel needs a Hopper GPU (sm_90)",
        "unsupported: a is on the cpu: the kernel needs a Hopper GPU (sm_90)",
        "unsupported: x is on the cpu: the kernel needs a Hopper GPU (sm_90)",
    ]
    for shape in PLAIN:
        assert {"cublas", "tuned"} <= {k for k, v in result["baselines"]["plain"][shape].items() if v["tflops"] > 0}
    assert all(v["tflops"] > 0 for v in result["baselines"]["gated"][GATED[0]].values())
    assert set(result["baselines"]["gated"][GATED[0]]) == {"cublas", "cublas+silu*mul", "tuned"}
    assert re.search(r"\| p-co2-m64n256k64s3g8 +\| unsupported: a is on the cpu", (tmp_path / "probe.md").read_text())


@pytest.fixture
def stand_in_kernel(monkeypatch):
    """hopper_gemm's entry points replaced by torch's products (times `factor`), as if this were an H100."""

    def install(factor: float):
        def matmul(a, b, config=None):
            return ((a.float() @ b.float()) * factor).to(a.dtype)

        def gated(x, w_gate, w_up, activation="silu", store_gu=False, config=None):
            g, u = x.float() @ w_gate.float().t(), x.float() @ w_up.float().t()
            h = (F.silu(g) * u * factor).to(x.dtype)
            return h, torch.cat([g, u], 1).to(x.dtype) if store_gu else x.new_empty(0)

        monkeypatch.setattr(hopper_gemm, "supported", lambda *args: None)
        monkeypatch.setattr(hopper_gemm, "gated_supported", lambda *args: None)
        monkeypatch.setattr(hopper_gemm, "hopper_matmul", matmul)
        monkeypatch.setattr(hopper_gemm, "hopper_gated", gated)
        monkeypatch.setattr(hopper_gemm, "launch_matmul", lambda a, b, c, config: c.copy_(matmul(a, b)))
        monkeypatch.setattr(
            hopper_gemm, "launch_gated", lambda x, wg, wu, h, gu, act, config: h.copy_(gated(x, wg, wu)[0])
        )

    return install


def _child(probe, capsys, kind: str, shapes: list[str]) -> dict:
    config = next(c for k, c in probe.GRID if k == kind)
    probe.child(kind, config, torch.bfloat16, shapes)
    return probe.outcome(kind, config, capsys.readouterr().out, "", 0)


@pytest.mark.parametrize("kind, shapes", [("plain", PLAIN), ("gated", GATED)])
def test_a_right_kernel_passes_every_check_and_is_timed(benchmark_script, stand_in_kernel, capsys, kind, shapes):
    probe = benchmark_script("hopper_gemm_probe")
    stand_in_kernel(1.0)
    result = _child(probe, capsys, kind, shapes)
    assert result["status"] == "ok"
    assert [c["shape"] for c in result["checks"]] == probe.CHECKS[kind] + shapes
    assert set(result["times"]) == set(shapes) and all(t["tflops"] > 0 for t in result["times"].values())


@pytest.mark.parametrize("kind, shapes", [("plain", PLAIN), ("gated", GATED)])
def test_a_wrong_kernel_is_reported_wrong_with_its_first_failure(
    benchmark_script, stand_in_kernel, capsys, kind, shapes
):
    probe = benchmark_script("hopper_gemm_probe")
    stand_in_kernel(1.1)  # ten percent off: past the gate's budget for bfloat16 (a few times torch's own error)
    result = _child(probe, capsys, kind, shapes)
    n = len(result["checks"])
    assert result["status"].startswith(f"wrong on {n} of {n} checks, first {probe.CHECKS[kind][0]}: output 0: error")


def test_the_probe_reads_every_layout_as_the_kernel_is_given_it(benchmark_script):
    probe = benchmark_script("hopper_gemm_probe")
    i = probe.inputs("plain", probe.parse("8x16x24:tn"), torch.float32)
    assert i["a"].shape == (8, 16) and i["a"].stride() == (1, 8)  # dy.T: a column-major a
    assert i["b"].shape == (16, 24) and i["b"].stride() == (24, 1)  # x: a row-major b
    i = probe.inputs("plain", probe.parse("8x16x24:nt"), torch.float32)
    assert i["a"].stride() == (16, 1) and i["b"].stride() == (1, 16)  # x @ W.T, W row-major (N, K)
    i = probe.inputs("gated", probe.parse("8x16x24+gu*8"), torch.float32)
    assert i["w_gate"].shape == (24, 16) and i["w_gate"].stride() == (16, 1) and i["store_gu"]
