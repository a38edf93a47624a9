"""The end-to-end reports say where a step leaves the GPU idle: the gaps between its kernels, summed by the op whose
launch the GPU was waiting for (e2e_common.waits_by_launcher); overlapping kernels count once, and per step."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import e2e_common  # noqa: E402  (beside the scripts)

from autotune.measure import environment  # noqa: E402


def test_idle_time_is_summed_by_the_launch_the_gpu_waited_for():
    kernels = [  # (start us, end us, launcher), unordered
        (15.0, 20.0, "aten::mm"),
        (0.0, 10.0, "aten::mm"),
        (18.0, 30.0, "ours"),  # overlaps the one before it: no gap, its overlap counted once as busy
        (40.0, 41.0, "autograd > ours"),
    ]
    waits = e2e_common.waits_by_launcher(kernels, steps=1)
    assert waits["span_ms"] == pytest.approx(0.041)
    assert waits["busy_ms"] == pytest.approx(0.026)  # 10 + 5 + 10 + 1
    assert waits["idle_ms"] == pytest.approx(0.015)
    assert waits["rows"] == [
        {"launcher": "autograd > ours", "ms": pytest.approx(0.010), "share": pytest.approx(10 / 15)},
        {"launcher": "aten::mm", "ms": pytest.approx(0.005), "share": pytest.approx(5 / 15)},
    ]


def test_times_are_per_step_and_the_rest_is_one_line():
    kernels = [(0.0, 1.0, "a"), (3.0, 4.0, "b"), (10.0, 11.0, "c"), (20.0, 21.0, "d")]
    waits = e2e_common.waits_by_launcher(kernels, steps=2, top=1)
    assert waits["idle_ms"] == pytest.approx(0.0085)  # (2 + 6 + 9) us over 2 steps
    assert [r["launcher"] for r in waits["rows"]] == ["d", "(2 other launchers)"]
    assert waits["rows"][1]["ms"] == pytest.approx(0.004)


def test_no_kernels_no_waits():
    assert e2e_common.waits_by_launcher([], steps=1) == {"span_ms": 0.0, "busy_ms": 0.0, "idle_ms": 0.0, "rows": []}


def test_the_report_has_a_section_per_variant_measured():
    waits = {"eager": e2e_common.waits_by_launcher([(0.0, 1.0, "a"), (5.0, 6.0, "b")], steps=1), "autotune": None}
    text = e2e_common.markdown(
        "t", environment.environment(), ["setup"], {"eager": {"ms": 1.0}}, "eager", [], {}, {}, "", "", {}, [], waits
    )
    assert "## Where the GPU waits: eager" in text and "the GPU idle 0.004 ms" in text
    assert "| b " in text
    assert "Where the GPU waits: autotune" not in text  # not measured (no GPU): no section


def test_off_the_gpu_nothing_is_measured():
    assert e2e_common.waits(lambda: None, steps=1) is None
