"""The end-to-end benchmark scripts run every variant on tiny sizes (--smoke) and write their report: each variant
timed or its error said, the patched variants' kernels launched and computing what eager computes, the breakdown
and what autotune.patch did. (Liger is left out: its kernels do not run under the Triton interpreter.)"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize(
    "script,variants,kernels",
    [
        (
            "e2e_decoder_layer",
            "eager,compile,autotune,autotune-forced,autotune-compile",
            # the MLP: gated_mlp, its down projection by linear, its backward's step and products
            {
                "rms_norm",
                "rms_norm_backward",
                "flash_attn",
                "flash_attn_backward",
                "gated_mlp",
                "gated_mlp_backward",
                "linear",
                "matmul",
            },
        ),
        (
            "e2e_unet_block",
            "eager,compile,autotune,autotune-forced,autotune-compile",
            {"group_norm", "layer_norm", "flash_attn"},
        ),
    ],
)
def test_smoke_run_writes_the_report(script, variants, kernels, benchmark_script, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import e2e_common beside them
    out = tmp_path / script
    monkeypatch.setattr(
        sys, "argv", [script, "--smoke", "--variants", variants, "--profile-steps", "1", "--out", str(out)]
    )
    benchmark_script(script).main()
    data = json.loads(out.with_name(script + ".json").read_text())
    assert list(data["times"]) == variants.split(",")
    assert all("ms" in t for t in data["times"].values()), data["times"]
    if script == "e2e_decoder_layer" and importlib.util.find_spec("transformers"):
        # transformers' layer: its apply_rotary_pos_emb calls are routed too (the torch layer's own rope is not)
        kernels = kernels | {"rope", "rope_backward"}
    assert set(data["kernels"]["autotune-forced"]) == kernels
    assert data["kernels"]["autotune"] == []  # no stored row for the CPU interpreter: every call on torch
    assert all(isinstance(d, float) and d < 1e-4 for d in data["differences"].values()), data["differences"]
    assert {d["routed"] for d in data["decisions"]} == {False}
    # a patched variant that launched none of our kernels is not judged against its goals: its time is torch's
    unrouted = [g for g in data["goals"] if g["goal"].startswith("autotune >=")]
    assert unrouted and all(g["met"] is None and "launched no autotune kernel" in g["note"] for g in unrouted)
    assert set(data["breakdowns"]) == set(variants.split(",")) and data["patch"]
    text = out.with_name(script + ".md").read_text()
    assert "## What autotune.patch did" in text and "## Breakdown: autotune-forced" in text
    assert "not GPU timings" in text
