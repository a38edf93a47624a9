"""benchmarks/combine_bench.py joins `autotune bench` runs into one report without forming a ratio across runs."""

import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TUNED_FIRST = str(RESULTS / "bench-matmul-H100-2026-11-24.json")  # before `report.time_balanced`
BALANCED = str(RESULTS / "bench-matmul-H100-2026-11-24c.json")  # the same six problems, order-balanced


def _combine_bench():
    spec = importlib.util.spec_from_file_location("combine_bench", ROOT / "benchmarks" / "combine_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_later_run_wins_and_runs_timed_differently_each_keep_their_method():
    combine = _combine_bench()
    merged = combine.merge([TUNED_FIRST, BALANCED])
    assert merged["records"] == json.loads(pathlib.Path(BALANCED).read_text())["records"]
    assert "Runs combined" in merged["timing"]
    assert [s["timing"].endswith("the two medians averaged") for s in merged["sources"]] == [False, True]
    assert combine.merge([BALANCED, BALANCED])["timing"].endswith("the two medians averaged")
