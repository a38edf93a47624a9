"""matmul, linear and gated_mlp's forward search a Gluon engine (the Hopper GEMM of hopper_gemm.py) beside their Triton
kernels: its configs are valid only where the Gluon kernel runs (a Hopper GPU, not the interpreter; half inputs, no
batch, no bias, no activation on a plain product, operands TMA reads; its own config facts), each engine fixes the
other's parameters, a search draws it only there and starts from the kernel's default config, the gate checks its
configs on problems it takes, and `autotune db merge` accepts its rows on a machine that cannot run it."""

import dataclasses
import json

import optuna
import pytest
import torch

from autotune import gpu
from autotune.db import BestRow, ConfigStore
from autotune.engine.plan import SearchOptions
from autotune.engine.search import search
from autotune.gate.verify import draw_problems
from autotune.kernels.gemm import problems as problems_
from autotune.kernels.gemm.gated_mlp import GATED_MLP
from autotune.kernels.gemm.gated_problems import parse_gated
from autotune.kernels.gemm.matmul import LINEAR, MATMUL
from autotune.search_spaces import gated_mlp as gated_space
from autotune.search_spaces import gemm_gluon as gluon
from autotune.search_spaces import hopper_gemm_config as kernel
from autotune.search_spaces import matmul as matmul_space
from autotune.ship.merge import row_refusal

LLAMA_UP = {**problems_.parse_matmul("8192x4096x14336"), "dtype": "bf16"}
LLAMA_DOWN = {**problems_.parse_linear("8192x14336x4096"), "dtype": "bf16"}
LLAMA_GATED = {**parse_gated("8192x4096x14336x4096"), "dtype": "bf16"}
COOPERATIVE = {
    **gluon.MATMUL_FIXED,
    "engine": "gluon",
    "BLOCK_M": 64,
    "BLOCK_N": 256,
    "BLOCK_K": 64,
    "GROUP_M": 8,
    "num_stages": 3,
    "NUM_CONSUMERS": 2,
    "SCHEDULE": "cooperative",
    "CONSUMER_REGISTERS": 240,
}
GATED = {**{k: v for k, v in COOPERATIVE.items() if k != "SPLIT_K"}, "BLOCK_N": 128}


@pytest.fixture
def hopper(monkeypatch):
    """This machine as the Gluon kernel needs it (a Hopper GPU with Triton 3.6's Gluon): the constraints alone."""
    monkeypatch.setattr(gluon, "unavailable", lambda: None)


@pytest.mark.parametrize(
    "space, config, problem",
    [(matmul_space.SPACE, COOPERATIVE, LLAMA_UP), (matmul_space.SPACE, COOPERATIVE, LLAMA_DOWN),
     (gated_space.SPACE, GATED, LLAMA_GATED)],
    ids=["matmul", "linear", "gated_mlp"],
)  # fmt: skip
def test_the_gluon_engine_is_rejected_here_naming_why(space, config, problem):
    assert gpu.interpreter_active()
    assert space.rejects(space.validate(config), problem) == "engine=gluon: the Triton interpreter does not run Gluon"
    assert space.starts(problem) == [] or all(c["engine"] == "triton" for c in space.starts(problem))


@pytest.mark.parametrize(
    "overrides, problem, reason",
    [
        ({}, LLAMA_UP, None),
        ({}, LLAMA_DOWN, None),
        ({}, {"m": 8192, "n": 4096, "k": 14336, "batch": 0, "dtype": "fp16"}, None),  # a call's problem at run time
        ({}, {**LLAMA_UP, "b_layout": "transposed"}, None),
        ({}, {**LLAMA_UP, "dtype": "fp32"}, "engine=gluon: it takes bf16 and fp16 inputs, not fp32"),
        ({}, {**LLAMA_UP, "batch": 4}, "engine=gluon: it multiplies one pair of matrices: no batch"),
        ({}, {**LLAMA_DOWN, "bias": True}, "engine=gluon: it adds no bias"),
        ({}, {**LLAMA_DOWN, "activation": "gelu_tanh"}, "engine=gluon: it applies no activation"),
        ({}, {**LLAMA_UP, "a_layout": "sliced"}, "engine=gluon: TMA reads operands with a unit stride"),
        ({}, {**LLAMA_UP, "k": 4097}, "engine=gluon: TMA steps by multiples of 16 bytes"),
        ({}, {**LLAMA_DOWN, "n": 4095}, "engine=gluon: TMA steps by multiples of 16 bytes"),
        ({"NUM_CONSUMERS": 1}, LLAMA_UP, "engine=gluon: CONSUMER_REGISTERS=240 with 1 consumer"),
        ({"SCHEDULE": "pingpong", "NUM_CONSUMERS": 1, "CONSUMER_REGISTERS": 232}, LLAMA_UP,
         "engine=gluon: SCHEDULE='pingpong' hands tiles to two consumers"),
        ({"BLOCK_M": 128}, LLAMA_UP, "engine=gluon: the accumulator takes 256 registers"),
        ({"num_stages": 4}, LLAMA_UP, "engine=gluon: the tiles take"),
        ({"BLOCK_M": 32}, LLAMA_UP, "engine=gluon: config['BLOCK_M'] must be one of (64, 128)"),
        ({}, {**LLAMA_UP, "m": 40}, "engine=gluon: a tile's rows"),
        ({"num_warps": 8}, LLAMA_UP, "engine=gluon fixes num_warps=4"),
        ({"SPLIT_K": 2}, LLAMA_UP, "engine=gluon fixes"),
    ],
)  # fmt: skip
def test_on_hopper_gluon_matmul_configs_run_where_the_kernel_does(hopper, overrides, problem, reason):
    space = matmul_space.SPACE
    found = space.rejects(space.validate({**COOPERATIVE, **overrides}), problem)
    assert (found is None) if reason is None else found.startswith(reason), found


@pytest.mark.parametrize(
    "overrides, problem, reason",
    [
        ({}, LLAMA_GATED, None),
        ({}, {**LLAMA_GATED, "activation": "gelu_tanh", "w_layout": "transposed"}, None),
        ({}, {**LLAMA_GATED, "bias": True}, "engine=gluon: it adds no bias"),
        ({}, {**LLAMA_GATED, "h": 14330}, "engine=gluon: TMA steps by multiples of 16 bytes"),
        ({"BLOCK_N": 256}, LLAMA_GATED, "engine=gluon: the gate's and the up projection's accumulators take 256"),
        ({"variant": "tma"}, LLAMA_GATED, "engine=gluon fixes variant=tma_persistent"),
    ],
)
def test_on_hopper_gluon_gated_configs_run_where_the_kernel_does(hopper, overrides, problem, reason):
    space = gated_space.SPACE
    found = space.rejects(space.validate({**GATED, **overrides}), problem)
    assert (found is None) if reason is None else found.startswith(reason), found


@pytest.mark.parametrize("space", [matmul_space.SPACE, gated_space.SPACE], ids=["matmul", "gated_mlp"])
def test_triton_configs_fix_the_gluon_parameters_to_their_earlier_values(hopper, space):
    triton = dict(space.default)
    assert {k: triton[k] for k in gluon.TRITON} == gluon.TRITON
    assert space.rejects({**triton, "NUM_CONSUMERS": 2}, LLAMA_GATED).startswith("engine=triton fixes NUM_CONSUMERS=1")


@pytest.mark.parametrize(
    "space, problem, default, fixed",
    [(matmul_space.SPACE, LLAMA_UP, kernel.DEFAULT_CONFIG, gluon.MATMUL_FIXED),
     (gated_space.SPACE, LLAMA_GATED, kernel.DEFAULT_GATED_CONFIG, gluon.GATED_FIXED)],
    ids=["matmul", "gated_mlp"],
)  # fmt: skip
def test_on_hopper_a_search_draws_both_engines_and_starts_from_the_kernels_default(hopper, space, problem, default,
                                                                                 fixed):  # fmt: skip
    start = space.starts(problem)[0]  # the first of the space's own starts: the probe's fastest
    assert start["engine"] == "gluon" and gluon.kernel_config(start) == default
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = [space.suggest(study.ask(), problem) for _ in range(120)]
    assert {c["engine"] for c in drawn} == {"triton", "gluon"}
    gluon_drawn = [c for c in drawn if c["engine"] == "gluon"]
    assert all(space.rejects(c, problem) is None for c in gluon_drawn)  # a draw that does not fit is repaired
    assert all({k: c[k] for k in fixed} == fixed for c in gluon_drawn)
    assert {c["SCHEDULE"] for c in gluon_drawn} == {"cooperative", "pingpong"}


def test_a_gluon_configs_resources_are_the_kernels():
    used = matmul_space.resources(COOPERATIVE, LLAMA_UP)
    assert used.tma and used.shared_memory == kernel.shared_memory_bytes(kernel.DEFAULT_CONFIG, gated=False)
    assert gated_space.resources(GATED, LLAMA_GATED).shared_memory == kernel.shared_memory_bytes(
        gluon.kernel_config(GATED), gated=True
    )


def test_the_gate_checks_a_gluon_config_on_problems_it_takes(hopper):
    """Plain draws are almost all off 16 bytes or strided: a Gluon config's draws are made ones it takes."""
    config = {**COOPERATIVE, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "NUM_CONSUMERS": 1,
              "CONSUMER_REGISTERS": 232}  # fmt: skip
    for spec in (MATMUL, LINEAR):
        problems = draw_problems(spec, config, torch.float16, examples=12, seed=3)
        assert len(problems) >= 12
        assert all(spec.space.rejects(config, p) is None for p in problems)
        assert {p["m"] % 8 for p in problems} == {0} and len({p["m"] for p in problems}) > 3


def test_a_search_on_the_cpu_tries_the_triton_kernels_alone(tmp_path):
    problem = problems_.parse_matmul("64x48x40")
    with ConfigStore(str(tmp_path / "search.sqlite")) as store:
        result = search(MATMUL, problem, torch.float16, SearchOptions(trials=3, examples=2, final_examples=3),
                        store=store)  # fmt: skip
    assert result.best_config is not None and result.best_config["engine"] == "triton"
    assert result.trials and all(t.config["engine"] == "triton" for t in result.trials)


@pytest.mark.parametrize(
    "spec, config, problem",
    [(MATMUL, COOPERATIVE, LLAMA_UP), (GATED_MLP, GATED, LLAMA_GATED)],
    ids=["matmul", "gated_mlp"],
)
def test_merge_accepts_a_gluon_row_tuned_on_an_h100_here(spec, config, problem):
    row = BestRow(kernel=spec.name, source_hash=spec.source_hash, config_json=json.dumps(config), time_ms=1.0,
                  dtype="bf16", gpu="H100", device_name="NVIDIA H100 80GB HBM3", bucket=spec.bucket(problem),
                  problem_json=json.dumps(problem), examples_verified=20, triton_version="3.6.0",
                  torch_version="x")  # fmt: skip
    assert row_refusal(row) is None
    wrong = dataclasses.replace(row, config_json=json.dumps({**config, "num_warps": 8}))
    assert "engine=gluon fixes num_warps=4" in row_refusal(wrong)
