"""gated_mlp's search space: its tile holds two accumulators, so the constraints charge a (BLOCK_M, BLOCK_N) config
what a (BLOCK_M, 2 * BLOCK_N) matmul tile costs; thousands of configs stay valid at the Llama shapes, the default
runs everywhere, the start configs are valid there, and every drawn config is one the constraints accept (a draw
that does not fit is repaired)."""

from __future__ import annotations

import itertools

import optuna
import pytest

from autotune.kernels.gemm.gated_mlp import GATED_MLP
from autotune.search_spaces.gated_mlp import DEFAULT, SPACE, bucket
from autotune.search_spaces.gemm_gluon import TRITON

LLAMA = {"m": 8192, "k": 4096, "h": 14336, "n": 4096}


def test_the_llama_shapes_have_thousands_of_valid_configs_and_the_starts_among_them():
    problem = {**LLAMA, "dtype": "bf16"}
    assert len(SPACE.grid_for(problem)) > 1000
    starts = SPACE.starts(problem)
    assert starts[0] == {
        "variant": "tma_persistent",
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
        "GROUP_M": 8,
        "num_warps": 8,
        "num_stages": 3,
        **TRITON,
    }
    assert len(starts) == 4 and SPACE.starts({**LLAMA, "dtype": "fp32"}) == []


def test_two_accumulators_cost_a_tile_twice_as_wide():
    problem = {**LLAMA, "dtype": "bf16"}
    wide = SPACE.with_overrides(variant="tma", BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=2)
    assert "accumulator registers" in SPACE.rejects(wide, problem)  # matmul runs this tile
    deep = SPACE.with_overrides(variant="tma", BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=3)
    assert "shared memory" in SPACE.rejects(deep, problem)  # 3 stages of (128 + 2 * 128) * 128 * 2 bytes
    assert SPACE.rejects({**deep, "num_stages": 2}, problem) is None
    small = {"m": 33, "k": 40, "h": 30, "n": 24, "dtype": "fp16"}
    assert "larger than the problem" in SPACE.rejects(SPACE.with_overrides(BLOCK_N=64, GROUP_M=1), small)


def test_the_default_runs_on_every_problem_in_every_dtype():
    for m, k, h, dtype in itertools.product((1, 7, 4097), (1, 65, 4096), (1, 129, 14336), ("fp32", "fp16", "bf16")):
        assert SPACE.rejects(DEFAULT, {"m": m, "k": k, "h": h, "n": 3, "dtype": dtype}) is None


@pytest.mark.parametrize(
    "problem", [{**LLAMA, "dtype": "bf16"}, {**LLAMA, "dtype": "fp32"}, GATED_MLP.interpreter_presets[0]]
)
def test_every_drawn_config_is_accepted(problem):
    problem = {"dtype": "fp16", **problem}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = set()
    for _ in range(200):
        trial = study.ask()
        config = SPACE.suggest(trial, problem)
        assert SPACE.rejects(config, problem) is None, config
        drawn.add(tuple(config.values()))
        study.tell(trial, 1.0)
    assert len(drawn) > 20


def test_the_bucket_rounds_each_size_up_to_a_power_of_two():
    assert bucket(LLAMA) == "m=8192,k=4096,h=16384,n=4096"
    assert GATED_MLP.bucket(GATED_MLP.parse_shape("4096x4096x11008")) == "m=4096,k=4096,h=16384,n=4096"
