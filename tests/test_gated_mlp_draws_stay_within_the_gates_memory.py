"""The gated MLP's problems drawn for one config on a GPU (steered to the sizes it runs on, up to STEERED_GROWTH
times larger than a plain draw) keep every operand and the output within that growth: the float64 reference and the
gate's comparison hold several copies of the output, and an unbounded m x n output ran an H100 out of memory while
`db verify` checked a shipped row."""

import pytest
import torch

from autotune import gpu
from autotune.gate import verify
from autotune.kernels.gemm.problems import STEERED_GROWTH
from autotune.runtime import registry
from autotune.search_spaces.gated_mlp import DEFAULT
from autotune.search_spaces.gemm_gluon import TRITON

PERSISTENT = {
    "variant": "tma_persistent",
    "BLOCK_M": 128,
    "BLOCK_N": 128,
    "BLOCK_K": 64,
    "GROUP_M": 8,
    "num_warps": 8,
    "num_stages": 3,
    **TRITON,
}
"""The H100's row at 8192x4096x14336x4096 (bf16)."""


@pytest.mark.parametrize("config", [PERSISTENT, DEFAULT], ids=["steered", "plain"])
def test_every_operand_and_the_output_of_a_draw_stays_within_the_growth(monkeypatch, config):
    monkeypatch.setattr(gpu, "interpreter_active", lambda: False)  # draw as on a GPU; nothing is launched
    max_numel = 1 << 20
    most = STEERED_GROWTH * max_numel
    spec = registry.get("gated_mlp")
    problems = verify.draw_problems(spec, config, torch.bfloat16, examples=40, seed=1897234856, max_numel=max_numel)
    assert len(problems) >= 30
    for p in problems:
        m, k, h, n = p["m"], p["k"], p["h"], p["n"]
        sizes = {"x": m * k, "w_gate": h * k, "gated": m * h, "w_down": n * h, "output": m * n}
        assert max(sizes.values()) <= most, (p, sizes)
