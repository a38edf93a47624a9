"""`autotune bench`: the tuned config (as the runtime picks it) timed side by side with the default config
and PyTorch on the same inputs, as a table, JSON, files and a PNG; bad requests refused before measuring."""

import json
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner
from stored_rows import store_best

import autotune
import autotune.kernels.vector_add.add as vector_add
from autotune import runtime
from autotune.cli import main
from autotune.measure import bench as bench_
from autotune.measure import report
from autotune.runtime import registry

STORED = {"BLOCK_SIZE": 256, "num_warps": 2, "num_stages": 1}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def bench(*args: str):
    return CliRunner().invoke(main, ["bench", *args])


def table_rows(text: str) -> list[dict]:
    """The rows of the GitHub table in text, as dicts of the printed cells."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))) for line in lines[2:]]


def test_the_table_has_a_row_per_shape_and_ratios_of_the_printed_times(user_db):
    result = bench("vector_add", "--against", "torch,default", "--shape", "3000", "--shape", "70000")
    assert result.exit_code == 0, result.output
    assert "[1/2] vector_add fp32 3000" in result.output and "[2/2] vector_add fp32 70000" in result.output  # progress
    assert "timings: wall-clock medians under the Triton interpreter on the CPU: not GPU timings" in result.stdout
    rows = table_rows(result.stdout)
    assert [r["shape"] for r in rows] == ["3000", "70000"] and {r["dtype"] for r in rows} == {"fp32"}
    assert list(rows[0]) == [
        "kernel",
        "dtype",
        "shape",
        "bucket",
        "config from",
        "unit",
        "tuned ms",
        "tuned rate",
        "default ms",
        "default rate",
        "torch ms",
        "torch rate",
        "vs default",
        "vs torch",
    ]
    for row, n in zip(rows, (3000, 70000)):
        tuned, default, eager = (float(row[f"{impl} ms"]) for impl in ("tuned", "default", "torch"))
        assert min(tuned, default, eager) > 0
        assert float(row["vs default"]) == pytest.approx(default / tuned, rel=2e-3)
        assert float(row["vs torch"]) == pytest.approx(eager / tuned, rel=2e-3)
        moved = 3 * n * 4  # x and y read, the sum written, in float32
        assert row["unit"] == "GB/s" and float(row["tuned rate"]) == pytest.approx(moved / tuned / 1e6, rel=2e-3)
        assert row["config from"] == "default"  # the user database is empty, and no CPU rows ship


def test_tuned_is_the_config_the_runtime_launches_exact_or_nearest_and_json_parses(user_db):
    store_best(user_db, vector_add.SPEC, "n=4096", STORED)
    with runtime.record_launches() as launches:
        result = bench("vector_add", "--against", "default", "--shape", "3000", "--shape", "70000", "--format", "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["gpu"] == "cpu-interpreter" and out["interpreter"] is True
    assert [r["config from"] for r in out["rows"]] == ["exact", "nearest (n=4096)"]
    tuned = [r for r in out["records"] if r["impl"] == "tuned"]
    default = [r for r in out["records"] if r["impl"] == "default"]
    assert [r["config"] for r in tuned] == [STORED, STORED] and [r["config"] for r in default] == [
        vector_add.SPACE.default
    ] * 2
    # Every call timed as "tuned" went through the public function and launched the stored config.
    assert launches and all(kernel == "vector_add" and config == STORED for kernel, config in launches)
    for row in out["rows"]:
        assert row["vs default"] == pytest.approx(row["default ms"] / row["tuned ms"])


def test_plot_and_out_write_a_png_a_table_and_every_measurement(user_db, tmp_path):
    from matplotlib.image import imread

    png, prefix = tmp_path / "plots" / "bench.png", tmp_path / "results" / "bench-cpu"
    result = bench(
        "vector_add", "--against", "torch,default", "--shape", "5000", "--plot", str(png), "--out", str(prefix)
    )
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    pixels = imread(png)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.std() > 0  # not blank
    saved = json.loads(prefix.with_name("bench-cpu.json").read_text())
    assert {r["impl"] for r in saved["records"]} == {"tuned", "default", "torch"}
    assert all(r["median_ms"] > 0 for r in saved["records"])
    assert table_rows(prefix.with_name("bench-cpu.md").read_text()) == table_rows(result.stdout)


def test_a_run_cut_short_keeps_the_shapes_it_measured_in_its_files(user_db, tmp_path, monkeypatch):
    measure_case, measured = report._measure_case, []

    def interrupted_on_the_third(*args):
        if len(measured) == 2:
            raise KeyboardInterrupt  # as Ctrl-C, or a time limit's SIGINT, while the third shape runs
        measured.append(args[0].problem)
        return measure_case(*args)

    monkeypatch.setattr(report, "_measure_case", interrupted_on_the_third)
    prefix = tmp_path / "bench-cut"
    result = bench(
        "vector_add",
        "--against",
        "default",
        "--shape",
        "3000",
        "--shape",
        "5000",
        "--shape",
        "7000",
        "--out",
        str(prefix),
    )
    assert result.exit_code != 0 and len(measured) == 2
    saved = json.loads(prefix.with_name("bench-cut.json").read_text())
    assert saved["partial"] == "2 of 3 cases measured"
    assert [r["shape"] for r in saved["rows"]] == ["3000", "5000"]
    assert all(r["median_ms"] > 0 for r in saved["records"])
    text = prefix.with_name("bench-cut.md").read_text()
    assert [r["shape"] for r in table_rows(text)] == ["3000", "5000"] and "partial: 2 of 3 cases measured" in text


def test_a_finished_run_is_not_marked_partial(user_db, tmp_path):
    prefix = tmp_path / "bench-whole"
    assert (
        bench(
            "vector_add", "--against", "default", "--shape", "3000", "--shape", "5000", "--out", str(prefix)
        ).exit_code
        == 0
    )
    saved = json.loads(prefix.with_name("bench-whole.json").read_text())
    assert "partial" not in saved and [r["shape"] for r in saved["rows"]] == ["3000", "5000"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["vector_add", "--against", "torch,eager"], "--against 'torch,eager': expected a comma-separated list of"),
        (["vector_add", "--gpu", "A100"], "a benchmark measures the GPU it runs on"),  # not this machine's
        (["vector_add", "--dtype", "int8"], "dtype 'int8'"),
        (["vector_add", "--shape", "12xfoo"], "expected sizes separated by 'x'"),
        (["vector_add", "softmax", "--shape", "4096"], "say whose shape it is: KERNEL=SPEC"),
        (["vector_add", "--shape", "softmax=8x8"], "kernel 'softmax' is not among those measured"),
        (["no_such_kernel"], "unknown kernel 'no_such_kernel'"),
        ([], "name the kernels to measure, or pass --all"),
        (["vector_add", "--all"], "name the kernels to measure, or pass --all"),
        pytest.param(
            ["vector_add", "--graphs"],
            "CUDA graphs need a CUDA GPU",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU"),
        ),
    ],
)
def test_bad_requests_are_one_clear_line_before_anything_is_measured(args, message):
    result = bench(*args)
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output and "[1/" not in result.output  # no case was started


def test_plot_without_matplotlib_says_how_to_install_it_before_measuring(tmp_path):
    # A fresh interpreter where importing matplotlib fails, as where it is not installed.
    code = (
        "import sys; sys.modules['matplotlib'] = None; from autotune.cli import main; "
        f"main(['bench', 'vector_add', '--against', 'default', '--plot', {str(tmp_path / 'x.png')!r}])"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "pip install 'autotune[plot]'" in run.stderr, run.stderr
    assert "[1/" not in run.stderr and not (tmp_path / "x.png").exists()


def test_all_means_every_shipped_kernel_backward_included_on_small_shapes_here():
    names = registry.shipped()
    assert {"layer_norm_backward", "rms_norm_backward", "group_norm_backward", "flash_attn_backward"} <= set(names)
    todo = report.plan(names, skip_unsupported=True)
    assert {case.spec.name for case in todo.cases} == set(names) and not todo.skipped
    assert {case.dtype for case in todo.cases} == {torch.float32}  # under the interpreter
    for case in todo.cases:
        assert case.problem in [case.spec.problem_for(p, case.dtype) for p in case.spec.interpreter_presets]
        assert case.spec.cost(case.problem, case.dtype).bytes < 2**21  # small: the interpreter is slow
    assert autotune.get("softmax").interpreter_presets  # every shipped kernel has a small shape of its own


def test_against_keeps_a_fixed_order_and_refuses_unknown_names():
    assert report.parse_against("compile, torch,default,torch") == ["default", "torch", "compile"]
    for text in ("", "cuda", "torch,,eagerly"):
        with pytest.raises(ValueError, match="--against"):
            report.parse_against(text)


@pytest.mark.gpu
def test_on_a_gpu_rates_are_a_share_of_its_datasheet_peak(user_db):
    result = bench(
        "vector_add",
        "softmax",
        "--against",
        "torch,compile,default",
        "--dtype",
        "bf16",
        "--shape",
        "vector_add=16777216",
        "--shape",
        "softmax=4096x4096",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["interpreter"] is False and out["peak_bandwidth_gbs"]
    for r in out["records"]:
        assert 0 < r["pct_peak"] <= 100 and r["pct_peak"] == pytest.approx(100 * r["gbs"] / out["peak_bandwidth_gbs"])
    assert [row["kernel"] for row in out["rows"]] == ["vector_add", "softmax"]
    assert all(row["vs compile"] == pytest.approx(row["compile ms"] / row["tuned ms"]) for row in out["rows"])


@pytest.mark.gpu
def test_graphs_add_each_calls_gpu_time_without_the_host_and_its_ratios(user_db):
    result = bench(
        "group_norm_backward",
        "--against",
        "default",
        "--dtype",
        "bf16",
        "--shape",
        "8x512x64x64",
        "--graphs",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    assert 0 < row["tuned graph ms"] and 0 < row["default graph ms"]
    assert row["vs default (graph)"] == pytest.approx(row["default graph ms"] / row["tuned graph ms"])
    assert row["vs default"] == pytest.approx(row["default ms"] / row["tuned ms"])


def test_implementations_are_timed_in_order_then_in_reverse_so_none_is_always_first():
    # A GPU that clocks down over seconds of large products favours whichever is timed first.
    calls = []

    def implementation(name):
        return lambda: calls.append(name)

    def broken():
        raise RuntimeError("cannot run this case")

    runs_once = iter([None])  # its first call works, its timing does not

    timings = bench_.time_balanced(
        {
            "tuned": implementation("tuned"),
            "default": implementation("default"),
            "vendor": broken,
            "compile": lambda: next(runs_once),
            "torch": implementation("torch"),
        },
        graphs=False,
    )
    assert isinstance(timings["vendor"], RuntimeError) and isinstance(timings["compile"], StopIteration)
    assert all(timings[name][0] > 0 and timings[name][1] is None for name in ("tuned", "default", "torch"))
    runs = [
        name for i, name in enumerate(calls) if i == 0 or calls[i - 1] != name
    ]  # each run of one implementation's calls
    # Once each (compiling), a round in order, a round in reverse (torch's two rounds meet in the middle).
    assert runs == ["tuned", "default", "torch"] + ["tuned", "default", "torch"] + ["default", "tuned"]


def test_more_rounds_alternate_the_order_and_are_averaged():
    calls = []
    timings = bench_.time_balanced({name: (lambda n=name: calls.append(n)) for name in ("a", "b")}, False, rounds=2)
    runs = [name for i, name in enumerate(calls) if i == 0 or calls[i - 1] != name]
    # Once each, then in order, in reverse, in order, in reverse (adjacent runs of one name meet in one).
    assert runs == ["a", "b"] + ["a", "b", "a", "b", "a"]
    assert timings["a"][0] > 0 and timings["b"][0] > 0
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        bench_.time_balanced({"a": lambda: None}, False, rounds=0)
