"""benchmarks/combine_bench.py joins `autotune bench` runs into one report without forming a ratio across runs."""

import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
# Two real H100 runs of `autotune bench matmul` (2026-11-24): timed before `report.time_balanced`, then the same six
# problems order-balanced.
TUNED_FIRST = str(DATA / "bench-matmul-tuned-first.json")
BALANCED = str(DATA / "bench-matmul-order-balanced.json")


def test_the_later_run_wins_and_runs_timed_differently_each_keep_their_method(benchmark_script):
    combine = benchmark_script("combine_bench")
    merged = combine.merge([TUNED_FIRST, BALANCED])
    assert merged["records"] == json.loads(pathlib.Path(BALANCED).read_text())["records"]
    assert "Runs combined" in merged["timing"]
    assert [s["timing"].endswith("the two medians averaged") for s in merged["sources"]] == [False, True]
    assert combine.merge([BALANCED, BALANCED])["timing"].endswith("the two medians averaged")


def test_a_combined_report_combined_again_names_the_runs_it_was_made_of(benchmark_script, tmp_path):
    combine = benchmark_script("combine_bench")
    first = tmp_path / "first.json"
    first.write_text(json.dumps(combine.merge([TUNED_FIRST, BALANCED])))
    again = combine.merge([str(first), BALANCED])
    names = [s["file"] for s in again["sources"]]
    assert names == [pathlib.Path(TUNED_FIRST).name, pathlib.Path(BALANCED).name, pathlib.Path(BALANCED).name]
