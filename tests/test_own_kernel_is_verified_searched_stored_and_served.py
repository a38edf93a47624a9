"""A kernel of one's own through @autotune.tune (tests/user_kernels.py, outside the package): verified, searched,
stored, queried and benchmarked by module:attr as the command line takes it, and launched with the stored config."""

import json

import pytest
import torch
import triton
import user_kernels
from click.testing import CliRunner
from stored_rows import store_best

import autotune
from autotune import gpu, runtime
from autotune.cli import main
from autotune.db import ConfigStore
from autotune.space import InvalidConfig


@pytest.fixture
def cli():
    return CliRunner()


def test_verify_search_query_and_launch_with_the_stored_config(cli, user_db):
    verified = cli.invoke(main, ["verify", "user_kernels:axpy", "--dtype", "fp32", "--examples", "15"])
    assert verified.exit_code == 0, verified.output
    assert "pass" in verified.output and "axpy" in verified.output

    searched = cli.invoke(
        main,
        [
            "search",
            "user_kernels:axpy",
            "--shape",
            "n=5000",
            "--dtype",
            "fp32",
            "--trials",
            "4",
            "--examples",
            "4",
            "--final-examples",
            "4",
            "--format",
            "json",
        ],
    )
    assert searched.exit_code == 0, searched.output
    with ConfigStore(str(user_db)) as store:
        rows = store.best_rows(kernel="axpy")
    assert len(rows) == 1 and rows[0].bucket == "n=8192" and rows[0].gpu == gpu.CPU_INTERPRETER
    assert rows[0].source_hash == user_kernels.axpy.spec.source_hash

    queried = cli.invoke(main, ["query", "user_kernels:axpy", "--format", "json"])
    assert queried.exit_code == 0, queried.output
    shown = json.loads(queried.output)
    assert [(r["bucket"], json.loads(r["config"]), r["current"]) for r in shown] == [("n=8192", rows[0].config, True)]

    runtime.clear_cache()
    x, y = torch.randn(6000), torch.randn(6000)
    with runtime.record_launches() as launched:
        out = user_kernels.axpy(x, y, 0.5)
    assert launched == [("axpy", rows[0].config)]
    torch.testing.assert_close(out, 0.5 * x + y)


def test_launch_takes_the_exact_bucket_then_the_nearest_then_the_first_config(user_db):
    spec = user_kernels.axpy.spec
    exact = {"BLOCK": 1024, "num_warps": 4, "num_stages": 2}
    store_best(user_db, spec, "n=1024", exact)
    with runtime.record_launches() as launched:
        user_kernels.axpy(torch.randn(1000), torch.randn(1000))  # bucket n=1024: its own row
        user_kernels.axpy(torch.randn(3000), torch.randn(3000))  # n=4096: no row; the nearest is n=1024's
        user_kernels.axpy(torch.randn(30), torch.randn(30), config={"BLOCK": 256})  # given: used as given
        user_kernels.axpy(torch.randn(30, dtype=torch.float16), torch.randn(30, dtype=torch.float16))  # no fp16 row
    first = dict(spec.space.default)
    assert first == {"BLOCK": 128, "num_warps": 2, "num_stages": 1}  # the first triton.Config
    assert [c for _, c in launched] == [exact, exact, first]  # an explicit config is no tuned launch


def test_a_config_given_to_the_call_overrides_the_lookup_and_fills_from_the_first(user_db):
    calls = []
    original = user_kernels.axpy.fn

    def spy(*args, config, **kwargs):
        calls.append(config)
        return original(*args, config=config, **kwargs)

    kernel = user_kernels.axpy
    kernel.fn = spy
    try:
        x = torch.randn(300)
        torch.testing.assert_close(kernel(x, x, config={"BLOCK": 256}), 3 * x)
        kernel(x, x, config=triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=3))
    finally:
        kernel.fn = original
    assert calls == [{"BLOCK": 256, "num_warps": 2, "num_stages": 1}, {"BLOCK": 1024, "num_warps": 8, "num_stages": 3}]
    with pytest.raises(InvalidConfig, match="BLOCK_SIZE"):
        kernel(x, x, config={"BLOCK_SIZE": 256})


def test_triton_config_lists_become_the_space_with_warps_and_stages():
    space = user_kernels.axpy.spec.space
    assert space.names == ("BLOCK", "num_warps", "num_stages")
    assert [p.values for p in space.params] == [(128, 256, 1024), (2, 4), (1, 2)]
    assert not space.constraints  # a full product: every combination listed
    # A list that is not a product: only the listed combinations are valid configs.
    listed = autotune.tune(
        args={"x": autotune.Tensor("n")},
        reference=lambda x: x,
        configs=[
            triton.Config({"B": 64}, num_warps=2, num_stages=3),
            triton.Config({"B": 128}, num_warps=8, num_stages=4),
        ],
        name="listed_only_copy",
    )(lambda x, *, config: x.clone())
    space = listed.spec.space
    assert space.rejects({"B": 64, "num_warps": 2, "num_stages": 3}, {}) is None
    assert space.rejects({"B": 64, "num_warps": 8, "num_stages": 4}, {}) == "not one of the listed triton.Configs"
    # A bool kwarg (a constexpr flag) is a value of its own: True is not 1, nor 1 True.
    flagged = autotune.tune(
        args={"x": autotune.Tensor("n")},
        reference=lambda x: x,
        name="flag_copy",
        configs=[triton.Config({"EVEN": e, "B": 1}) for e in (False, True)],
    )(lambda x, *, config: x.clone())
    assert flagged.spec.space.validate({"EVEN": True, "B": 1, "num_warps": 4, "num_stages": 3})["EVEN"] is True
    with pytest.raises(InvalidConfig, match="EVEN=1"):
        flagged.spec.space.validate({"EVEN": 1, "B": 1, "num_warps": 4, "num_stages": 3})
    with pytest.raises(InvalidConfig, match="B=True"):
        flagged.spec.space.validate({"EVEN": True, "B": True, "num_warps": 4, "num_stages": 3})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"configs": [triton.Config({"B": 1}, pre_hook=lambda nargs: None)]}, "pre_hook"),
        ({"configs": [triton.Config({"B": 1}), triton.Config({"C": 1})]}, "every config must set the same kwargs"),
        ({"configs": [{"B": 1}]}, "not a triton.Config"),
        ({"configs": [triton.Config({"B": 1})], "key": ("m",)}, "key= names ['m']"),
        ({"configs": [triton.Config({"B": 1})], "sizes": {"n": (5, 1)}}, "sizes['n']"),
        ({"configs": [triton.Config({"B": 1})], "dtypes": ("int8",)}, "dtypes="),
        ({}, "exactly one"),
    ],
)
def test_a_wrong_declaration_is_one_clear_error_at_decoration(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message.replace("[", r"\[").replace("(", r"\(")):
        autotune.tune(args={"x": autotune.Tensor("n")}, reference=lambda x: x, name="declared_wrong", **kwargs)(
            lambda x, *, config: x.clone()
        )


def test_the_launcher_must_take_config_and_name_its_arguments():
    decorate = autotune.tune(
        args={"x": autotune.Tensor("n")},
        reference=lambda x: x,
        configs=[triton.Config({"B": 1})],
        name="declared_wrong",
    )
    with pytest.raises(TypeError, match="config"):
        decorate(lambda x: x)
    with pytest.raises(ValueError, match="not a parameter"):
        autotune.tune(
            args={"z": autotune.Tensor("n")},
            reference=lambda x: x,
            configs=[triton.Config({"B": 1})],
            name="declared_wrong",
        )(lambda x, *, config: x)
    with pytest.raises(ValueError, match="shipped kernel"):
        autotune.tune(
            args={"x": autotune.Tensor("n")}, reference=lambda x: x, configs=[triton.Config({"B": 1})], name="softmax"
        )(lambda x, *, config: x)


def test_bad_calls_are_clear_errors_before_any_launch(user_db):
    x = torch.randn(100)
    with pytest.raises(ValueError, match="axpy: y has n=5, but an earlier argument has n=100"):
        user_kernels.axpy(x, torch.randn(5))
    with pytest.raises(TypeError, match="axpy: y must be a torch.Tensor, got int"):
        user_kernels.axpy(x, 3)
    with pytest.raises(TypeError, match="axpy: missing a required argument: 'y'"):
        user_kernels.axpy(x)
    with pytest.raises(TypeError, match="axpy: x is torch.float64; tuned for fp32, fp16"):
        user_kernels.axpy(x.double(), x.double())
    with pytest.raises(ValueError, match="scale_rows: x must have 2 dims"):
        user_kernels.scale_rows(x, x)


def test_shapes_on_the_command_line_are_name_value_pairs(cli, user_db):
    spec = user_kernels.scale_rows.spec
    assert spec.parse_shape("m=3,n=100") == {"sizes": {"m": 3, "n": 100}, "magnitude": 1.0}
    for shape, message in [
        ("3x100", "expected name=value pairs"),
        ("m=3", "give n=... too"),
        ("m=3,n=x", "whole number"),
    ]:
        result = cli.invoke(main, ["search", "user_kernels:scale_rows", "--shape", shape, "--trials", "1"])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_bench_measures_the_decorated_call_against_its_first_config(cli, user_db):
    result = cli.invoke(
        main, ["bench", "user_kernels:axpy", "--shape", "n=3000", "--against", "torch,default", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [(r["kernel"], r["shape"], r["bucket"], r["config from"]) for r in rows] == [
        ("axpy", "n=3000", "n=4096", "default")
    ]


def test_rows_are_tied_to_the_launcher_and_kernel_source_not_the_decoration():
    spec = user_kernels.axpy.spec
    launcher, *kernels = spec.sources
    assert launcher.startswith("def axpy(") and "@autotune.tune" not in launcher
    assert kernels == [user_kernels._axpy_kernel]
    again = autotune.tune(
        args={"x": autotune.Tensor("n"), "y": autotune.Tensor("n")},
        reference=lambda x, y, alpha=3.0: alpha * x + y,  # another reference, same kernel
        configs=[
            triton.Config({"BLOCK": b}, num_warps=w, num_stages=s)
            for b in (128, 256, 1024)
            for w in (2, 4)
            for s in (1, 2)
        ],
        name="axpy_again",
    )(user_kernels.axpy.fn)
    assert again.spec.source_hash == spec.source_hash
    assert user_kernels.tail_bug_axpy.spec.source_hash != spec.source_hash


def test_an_isolated_search_loads_the_decorated_kernel_in_its_worker(user_db):
    from autotune.engine.plan import SearchOptions
    from autotune.engine.precompile import importable_name
    from autotune.engine.search import search

    spec = user_kernels.scale_rows.spec
    assert importable_name(spec) == "user_kernels:scale_rows"
    with ConfigStore(str(user_db)) as store:
        result = search(
            spec,
            spec.parse_shape("m=3,n=100"),
            torch.float32,
            SearchOptions(trials=2, examples=3, final_examples=3, isolate=True),
            store=store,
        )
    assert result.stored and result.best_config in (
        {"BLOCK": 64, "num_warps": 1, "num_stages": 3},
        {"BLOCK": 32, "num_warps": 2, "num_stages": 3},
    )
