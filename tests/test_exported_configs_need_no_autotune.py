"""`autotune db export --format triton|json`: one kernel's tuned configs as a Python module of triton.Config lists
that `@triton.autotune` takes as it is, or as a plain JSON file keyed by GPU, dtype and bucket."""

import importlib.util
import json
import time

import pytest
import torch
import triton
import user_kernels
from click.testing import CliRunner
from stored_rows import store_best

from autotune import gpu
from autotune.cli import main

SMALL = {"BLOCK": 256, "num_warps": 2, "num_stages": 1}
LARGE = {"BLOCK": 1024, "num_warps": 4, "num_stages": 2}


@pytest.fixture
def tuned(user_db):
    spec = user_kernels.axpy.spec
    store_best(user_db, spec, "n=1024", SMALL)
    store_best(user_db, spec, "n=65536", LARGE)
    store_best(user_db, spec, "n=1024", LARGE, dtype="fp16")
    store_best(user_db, spec, "n=4096", SMALL, source_hash="an-older-source")  # not served: not exported
    return user_db


def _load(path):
    spec = importlib.util.spec_from_file_location("exported_configs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_bench(fn, quantiles):
    """triton.autotune's timer, by wall clock (its default times on a GPU)."""
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms]


def test_the_triton_export_is_a_config_list_triton_autotune_uses(tuned, tmp_path):
    out = tmp_path / "axpy_configs.py"
    result = CliRunner().invoke(
        main,
        [
            "db",
            "export",
            "--format",
            "triton",
            "--kernel",
            "user_kernels:axpy",
            "--gpu",
            gpu.current_gpu().name,
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    module = _load(out)
    assert set(module.CONFIGS) == {("fp32", "n=1024"), ("fp32", "n=65536"), ("fp16", "n=1024")}
    (small,) = module.CONFIGS[("fp32", "n=1024")]
    assert (small.kwargs, small.num_warps, small.num_stages) == ({"BLOCK": 256}, 2, 1)
    assert [(c.kwargs, c.num_warps, c.num_stages) for c in module.ALL_CONFIGS] == [
        ({"BLOCK": 1024}, 4, 2),
        ({"BLOCK": 256}, 2, 1),
    ]  # each distinct config once

    autotuned = triton.autotune(configs=module.ALL_CONFIGS, key=["n"], do_bench=_cpu_bench)(user_kernels._axpy_kernel)
    x, y = torch.randn(3000), torch.randn(3000)
    out_t = torch.empty_like(x)
    autotuned[lambda meta: (triton.cdiv(3000, meta["BLOCK"]),)](x, y, out_t, 3000, 2.0)
    torch.testing.assert_close(out_t, 2 * x + y)
    assert autotuned.best_config.kwargs["BLOCK"] in (256, 1024)


def test_the_json_export_is_keyed_by_gpu_dtype_and_bucket(tuned, tmp_path):
    out = tmp_path / "axpy.json"
    result = CliRunner().invoke(
        main, ["db", "export", "--format", "json", "--kernel", "user_kernels:axpy", "--gpu", "cpu", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == {
        gpu.CPU_INTERPRETER: {"fp32": {"n=1024": SMALL, "n=65536": LARGE}, "fp16": {"n=1024": LARGE}}
    }


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "json"], "give --kernel"),
        (["--format", "json", "--kernel", "user_kernels:axpy", "--all-sources"], "--all-sources is for --format db"),
        (["--format", "triton", "--kernel", "user_kernels:scale_rows"], "no rows of scale_rows"),
    ],
)
def test_a_portable_export_that_cannot_be_made_writes_nothing(tuned, tmp_path, args, message):
    out = tmp_path / "nothing.py"
    result = CliRunner().invoke(main, ["db", "export", "--gpu", "cpu", "-o", str(out), *args])
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_an_existing_file_is_never_overwritten(tuned, tmp_path):
    out = tmp_path / "taken.json"
    out.write_text("mine")
    result = CliRunner().invoke(
        main, ["db", "export", "--format", "json", "--kernel", "user_kernels:axpy", "--gpu", "cpu", "-o", str(out)]
    )
    assert result.exit_code == 1 and "exists" in result.output
    assert out.read_text() == "mine" and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
