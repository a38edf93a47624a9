"""flash_attn_backward's dv="split": a pass of its own recomputes dV = P^T dO with P split into two half operands
(P rounded, then the rounding's remainder rounded), after either engine's kernels. On the problem where every
rounded-P config failed `db verify` on the H200 (flash_attn.DV_SPLIT_NEEDED), the rounded config fails the gate on
dV and the split one passes; float32 inputs, whose P is float64, refuse it; the search draws it for half inputs."""

import optuna
import pytest
import torch

import autotune
from autotune.gate.verify import check_problem, verify
from autotune.kernels.attention import problems as problems_
from autotune.search_spaces import flash_attn_backward_gluon as engine
from autotune.search_spaces.flash_attn import BACKWARD_SPACE
from autotune.spec import DTYPE_NAMES

CANCELLING = {
    "batch": 3,
    "causal": False,
    "dtype": "fp16",
    "head_dim": 64,
    "heads": 8,
    "kv_heads": 2,
    "layout": "contiguous",
    "magnitude": 3.0,
    "nk": 1506,
    "nq": 3,
    "scale": 1.0,
}
SEED = 6003448  # the H200's draw


@pytest.mark.parametrize("dv", ["rounded", "split"])
def test_p_split_for_dv_passes_the_problem_rounded_p_fails(dv):
    config = BACKWARD_SPACE.validate({**BACKWARD_SPACE.default, "BLOCK_M": 16, "BLOCK_N": 64, "dv": dv})
    failure = check_problem(autotune.get("flash_attn_backward"), config, CANCELLING, torch.float16, seed=SEED)
    if dv == "rounded":
        assert failure is not None and failure.reason.startswith("output 2: error"), failure  # dv is output 2
    else:
        assert failure is None, failure


def test_float32_refuses_dv_split_and_half_inputs_take_it():
    split = {**BACKWARD_SPACE.default, "BLOCK_M": 16, "BLOCK_N": 64, "dv": "split"}
    assert "no remainder" in BACKWARD_SPACE.rejects(split, {**CANCELLING, "dtype": "fp32"})
    assert BACKWARD_SPACE.rejects(split, CANCELLING) is None
    assert BACKWARD_SPACE.default["dv"] == "rounded"  # what every row stored before the pass meant


@pytest.mark.parametrize("dtype, drawn", [("fp16", {"rounded", "split"}), ("fp32", {"rounded"})])
def test_the_search_draws_dv_for_half_inputs_only(dtype, drawn):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    problem = {**CANCELLING, "dtype": dtype}
    seen = {BACKWARD_SPACE.suggest(study.ask(), problem)["dv"] for _ in range(40)}
    assert seen == drawn


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_dv_split_verifies_on_the_gpu_after_either_engine(dtype):
    # A Triton config and, where the Gluon engine runs, its first start, each with dv="split": the cancelling
    # problem first, then drawn ones and the edges of a long causal preset.
    spec = autotune.get("flash_attn_backward")
    name = DTYPE_NAMES[dtype]
    prefill = {**problems_.problem(1, 16, 4096, 128, causal=True), "dtype": name}
    configs = [{**BACKWARD_SPACE.default, "BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}]
    configs += engine.starts(prefill)[:1]
    for config in configs:
        config = BACKWARD_SPACE.validate({**config, "dv": "split"})
        if BACKWARD_SPACE.rejects(config, prefill) is not None:
            continue
        cancelling = [({**CANCELLING, "dtype": name}, SEED)]  # on the inputs it failed with, where it applies
        result = verify(
            spec, config, dtype, examples=10, extra_problems=spec.edges_for(prefill), known_failures=cancelling
        )
        assert result.passed, (config, result.failure and result.failure.describe())
