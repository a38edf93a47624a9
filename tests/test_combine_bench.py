"""benchmarks/combine_bench.py joins `autotune bench` runs into one report without forming a ratio across runs."""

import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TUNED_FIRST = str(RESULTS / "bench-matmul-H100-2026-11-24.json")  # before `report.time_balanced`
BALANCED = str(RESULTS / "bench-matmul-H100-2026-11-24c.json")  # the same six problems, order-balanced


def test_the_later_run_wins_and_runs_timed_differently_each_keep_their_method(benchmark_script):
    combine = benchmark_script("combine_bench")
    merged = combine.merge([TUNED_FIRST, BALANCED])
    assert merged["records"] == json.loads(pathlib.Path(BALANCED).read_text())["records"]
    assert "Runs combined" in merged["timing"]
    assert [s["timing"].endswith("the two medians averaged") for s in merged["sources"]] == [False, True]
    assert combine.merge([BALANCED, BALANCED])["timing"].endswith("the two medians averaged")
