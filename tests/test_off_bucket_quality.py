"""Nearest-bucket quality (autotune.offbucket, benchmarks/off_bucket.py): on shapes no stored row was tuned on,
the runtime's config is timed against a fresh search of the exact shape, and the user's database is left as it was."""

import json
import pathlib
import runpy
import sqlite3
import statistics
import subprocess
import sys

import pytest
import torch
from stored_rows import store_best
from wrong_kernels import BAD_BLOCK, TAIL_BUG_ADD

import autotune.kernels.fused_softmax.softmax as softmax
import autotune.kernels.vector_add.add as vector_add
from autotune import db
from autotune.gate.verify import check_problem
from autotune.measure import offbucket
from autotune.runtime import registry

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROW_CONFIG = {"BLOCK_SIZE": 256, "num_warps": 2, "num_stages": 1}
TINY = dict(trials=3, examples=3, final_examples=5)


def _contents(path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


def test_off_bucket_shapes_take_the_stored_row_and_are_timed_against_their_own_search(user_db):
    store_best(user_db, vector_add.SPEC, "n=1024", ROW_CONFIG, problem=vector_add.parse_shape("1000"))
    before = _contents(user_db)
    finished = []  # what on_record saw after each shape: a run cut short keeps the shapes it finished
    records = offbucket.measure_off_bucket(
        vector_add.SPEC,
        [vector_add.parse_shape("900"), vector_add.parse_shape("3000")],
        torch.float32,
        **TINY,
        on_record=lambda so_far: finished.append([(r["shape"], r["ratio"]) for r in so_far]),
    )
    assert finished == [[("900", records[0]["ratio"])], [(r["shape"], r["ratio"]) for r in records]]

    same_bucket, other_bucket = records
    assert (same_bucket["bucket"], same_bucket["source"]) == ("n=1024", "exact")  # the row's bucket, not its problem
    assert (other_bucket["bucket"], other_bucket["source"]) == ("n=4096", "nearest")
    for r in records:
        assert r["tuned_for"] == "n=1024" and r["tuned_on"] == "1000" and r["database"] == db.as_url(str(user_db))
        assert r["runtime_config"] == ROW_CONFIG
        assert (
            vector_add.SPACE.validate(r["exact_config"]) == r["exact_config"]
            and 1 <= r["evaluations"] <= TINY["trials"]
        )
        assert r["same_config"] == (r["exact_config"] == ROW_CONFIG) and r["runtime_failure"] is None
        assert r["runtime_config_searched"]  # the exact search starts from the runtime's config: it can only do better
        assert r["runtime_ms"] > 0 and r["exact_ms"] > 0 and r["default_ms"] > 0
        assert r["ratio"] == r["runtime_ms"] / r["exact_ms"]
    assert _contents(user_db) == before  # the exact searches stored nothing there

    summary = offbucket.summarize(records)
    ratios = [r["ratio"] for r in records]
    assert summary["kernels"]["vector_add"]["mean"] == pytest.approx(statistics.fmean(ratios))
    assert summary["overall"]["shapes"] == 2 and summary["overall"]["worst"] == max(ratios)
    assert summary["overall"]["geomean"] == pytest.approx(statistics.geometric_mean(ratios))
    assert summary["goal_met"] == (statistics.fmean(ratios) <= offbucket.GOAL) and summary["unmeasured"] == 0


def test_a_runtime_config_that_computes_the_shape_wrong_is_reported_and_gets_no_ratio(user_db):
    wrong = {"BLOCK_SIZE": BAD_BLOCK, "num_warps": 4, "num_stages": 1}  # wrong wherever its last block is partial
    store_best(user_db, TAIL_BUG_ADD, "n=2048", wrong, problem=vector_add.parse_shape("2048"))
    [record] = offbucket.measure_off_bucket(TAIL_BUG_ADD, [vector_add.parse_shape("3000")], torch.float32, **TINY)
    assert record["source"] == "nearest" and record["runtime_config"] == wrong
    assert record["runtime_failure"].startswith("incorrect") and record["ratio"] is None and "runtime_ms" not in record
    assert check_problem(TAIL_BUG_ADD, record["exact_config"], record["problem"], torch.float32) is None
    assert record["exact_ms"] > 0
    summary = offbucket.summarize([record])
    assert summary["unmeasured"] == 1 and summary["overall"] is None and not summary["goal_met"]


def _no_search(*args, **kwargs):
    raise AssertionError("a search ran before the request was checked")


def test_bad_requests_fail_before_any_search(user_db, monkeypatch):
    monkeypatch.setattr(offbucket, "search", _no_search)
    store_best(user_db, vector_add.SPEC, "n=1024", ROW_CONFIG, problem=vector_add.parse_shape("1000"))
    fine, on_row = vector_add.parse_shape("3000"), vector_add.parse_shape("1000")
    with pytest.raises(ValueError, match="tuned on this very problem"):
        offbucket.measure_off_bucket(vector_add.SPEC, [fine, on_row], torch.float32, **TINY)
    with pytest.raises(ValueError, match="dtype torch.float64 is not supported by vector_add"):
        offbucket.measure_off_bucket(vector_add.SPEC, [fine], torch.float64, **TINY)
    with pytest.raises(ValueError, match="trials must be >= 1"):
        offbucket.measure_off_bucket(vector_add.SPEC, [fine], torch.float32, trials=0)
    with pytest.raises(ValueError, match="timeout must be a positive"):
        offbucket.measure_off_bucket(vector_add.SPEC, [fine], torch.float32, timeout=0)
    with pytest.raises(ValueError, match="at least one"):
        offbucket.measure_off_bucket(vector_add.SPEC, [], torch.float32)
    with pytest.raises(TypeError, match="spec must be a KernelSpec"):
        offbucket.measure_off_bucket("vector_add", [fine], torch.float32)


SCRIPT = ROOT / "benchmarks" / "off_bucket.py"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kernel", "nope"], "unknown kernel 'nope'"),
        (["--kernel", "softmax", "--shape", "softmax=4096xabc"], "--shape for softmax: shape '4096xabc'"),
        (
            ["--kernel", "wrong_kernels:TAIL_BUG_ADD"],
            "no built-in off-bucket shapes for wrong_kernels:TAIL_BUG_ADD"
            ": pass --shape wrong_kernels:TAIL_BUG_ADD=SPEC",
        ),
        (
            [
                "--kernel",
                "vector_add",
                "--kernel",
                "softmax",
                "--dtype",
                "fp32",
                "--shape",
                "vector_add=3000",
                "--shape",
                "softmax=8x300",
            ],
            "softmax 8x300: the stored row of bucket m=8,n=512 was tuned on this very problem",
        ),
    ],
)
def test_the_script_refuses_bad_requests_in_one_line_before_any_search(tmp_path, user_db, monkeypatch, args, message):
    store_best(user_db, softmax.SPEC, "m=8,n=512", {**softmax.SPEC.space.default}, problem=softmax.parse_shape("8x300"))
    monkeypatch.setattr(offbucket, "search", _no_search)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args, "--out", str(tmp_path / "ob")])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert str(exited.value).startswith(f"off_bucket.py: {message}")
    assert not list(tmp_path.glob("ob.*"))


def test_the_script_writes_records_summary_and_environment(tmp_path, user_db):
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--kernel",
            "vector_add",
            "--dtype",
            "fp32",
            "--shape",
            "vector_add=3000",
            "--trials",
            "3",
            "--examples",
            "3",
            "--final-examples",
            "5",
            "--out",
            str(tmp_path / "ob"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    saved = json.loads((tmp_path / "ob.json").read_text())
    [record] = saved["records"]
    assert saved["interpreter"] is True and saved["gpu"] and saved["date"] and saved["trials"] == 3
    assert record["shape"] == "3000" and record["source"] == "default" and record["ratio"] > 0  # empty user database
    assert saved["summary"]["overall"]["mean"] == record["ratio"]
    table = (tmp_path / "ob.md").read_text()
    assert table in run.stdout and "| vector_add" in table and "Goal (mean ratio <= 1.10)" in table
    # where each shape's time went, as it finishes: the search's phases and the final timing
    assert record["search_phases"]["search"] > 0 and record["timing_seconds"] > 0
    assert "vector_add 3000 done: search " in run.stdout and "final timing" in run.stdout


def test_every_shipped_kernel_has_built_in_off_bucket_shapes_that_its_spec_parses(benchmark_script):
    shapes = benchmark_script("off_bucket").DEFAULT_SHAPES
    assert sorted(shapes) == registry.shipped()
    for name, specs in shapes.items():
        assert specs and all(registry.get(name).parse_shape(s) for s in specs), name


def _run(date, gpu="H100", **ratios):
    """A saved run as off_bucket.py writes it, with one vector_add record per shape=ratio."""
    records = [
        {
            "kernel": "vector_add",
            "dtype": "bf16",
            "shape": shape.lstrip("s"),
            "bucket": "n=4096",
            "source": "nearest",
            "tuned_for": "n=1024",
            "tuned_on": "1000",
            "same_config": False,
            "evaluations": 3,
            "search_seconds": 1.0,
            "runtime_ms": ratio,
            "exact_ms": 1.0,
            "default_ms": 2.0,
            "ratio": ratio,
            "runtime_failure": None,
        }
        for shape, ratio in ratios.items()
    ]
    return {
        "gpu": gpu,
        "device_name": f"NVIDIA {gpu}",
        "torch": "2.11",
        "triton": "3.6",
        "date": date,
        "timing": "medians",
        "dtype": "bf16",
        "trials": 10,
        "timeout": 20.0,
        "records": records,
        "summary": offbucket.summarize(records),
    }


def test_merged_runs_keep_each_shapes_latest_record_and_list_the_one_it_replaced():
    first, second = _run("day 1", s3000=1.9, s5000=1.05), _run("day 2", s3000=1.02, s7000=0.99)
    merged = offbucket.merge([first, second])
    assert [(r["shape"], r["ratio"], r["run"]) for r in merged["records"]] == [
        ("3000", 1.02, 1),
        ("5000", 1.05, 0),
        ("7000", 0.99, 1),
    ]
    assert [(r["shape"], r["ratio"], r["run"]) for r in merged["superseded"]] == [("3000", 1.9, 0)]
    assert merged["summary"]["overall"]["mean"] == pytest.approx(statistics.fmean([1.02, 1.05, 0.99]))
    assert [run["date"] for run in merged["runs"]] == ["day 1", "day 2"] and merged["date"] == "day 2"
    assert offbucket.merge([second, first])["records"][0]["ratio"] == 1.9  # order decides which is latest

    again = offbucket.merge([merged, _run("day 3", s5000=1.01)])  # a merged report merges as the runs it was made of
    assert [run["date"] for run in again["runs"]] == ["day 1", "day 2", "day 3"]
    assert [(r["shape"], r["ratio"], r["run"]) for r in again["records"]] == [
        ("3000", 1.02, 1),
        ("5000", 1.01, 2),
        ("7000", 0.99, 1),
    ]
    assert [(r["shape"], r["ratio"], r["run"]) for r in again["superseded"]] == [("3000", 1.9, 0), ("5000", 1.05, 0)]


@pytest.mark.parametrize(
    "results, message", [([], "at least one"), ([_run("d", "H100"), _run("d", "H200")], "different GPUs")]
)
def test_runs_of_different_gpus_or_none_are_not_merged(results, message):
    with pytest.raises(ValueError, match=message):
        offbucket.merge(results)


def test_the_script_merges_saved_runs_into_one_report(tmp_path, monkeypatch):
    paths = []
    first = _run("day 1", s3000=1.9)  # timed from CUDA graphs too: the table shows the GPU times the ratio is of
    first["records"][0].update(runtime_ms=0.1496, exact_ms=0.0911, runtime_gpu_ms=0.0361, exact_gpu_ms=0.019)
    for i, run in enumerate([first, _run("day 2", s3000=1.02, s7000=0.99)]):
        paths += ["--merge", str(tmp_path / f"run{i}.json")]
        (tmp_path / f"run{i}.json").write_text(json.dumps(run))
    monkeypatch.setattr(offbucket, "search", _no_search)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *paths, "--out", str(tmp_path / "all")])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    saved = json.loads((tmp_path / "all.json").read_text())
    assert [r["ratio"] for r in saved["records"]] == [1.02, 0.99] and saved["summary"]["goal_met"]
    table = (tmp_path / "all.md").read_text()
    assert "run 0: day 1" in table and "run 1: day 2" in table and "Superseded" in table and "1.9" in table
    superseded = table.split("Superseded")[1]
    assert "0.0361" in superseded and "CUDA graph" in superseded and "0.1496" not in superseded


@pytest.mark.parametrize(
    "change, reason",
    [
        ({}, None),
        ({"exact_ms": 1.2}, None),  # within 25% of the search's own time
        ({"exact_ms": 2.47}, "unstable timing: the exact config's final time is +147% off its search time"),
        ({"exact_ms": 2.47, "interpreter": True}, None),  # wall-clock timings under the interpreter always move
        ({"evaluations": 1, "same_config": True}, "the exact search evaluated only the runtime's config"),
        # GPU times (CUDA graph) judge the record: below the search's do_bench time is a host-bound call's, not drift
        ({"exact_ms": 2.47, "exact_gpu_ms": 0.5, "runtime_gpu_ms": 0.3}, None),
        (
            {"exact_ms": 1.0, "exact_gpu_ms": 1.3, "runtime_gpu_ms": 0.8},
            "unstable timing: the exact config's final time is +30% off its search time",
        ),
    ],
)
def test_a_record_whose_timing_moved_or_whose_search_tried_nothing_else_is_left_out_of_the_summary(change, reason):
    kept = {**_run("d", s3000=1.0)["records"][0], "search_best_ms": 1.0}
    record = {**kept, "shape": "5000", "ratio": 0.6, **change}
    assert offbucket.left_out(record) == reason
    summary = offbucket.summarize([kept, record])
    assert summary["overall"]["shapes"] == (2 if reason is None else 1)
    assert summary["left_out"] == (0 if reason is None else 1)
