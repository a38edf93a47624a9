"""A config is checked on problems it can run on, drawn as such: a single-pass softmax with a 1024 block only
runs on rows of 513 to 1024 elements, and a persistent GEMM tile only where the output has more tiles than
the GPU has SMs. Drawing everything and rejecting the rest cost db verify 35 s of Hypothesis per softmax row
on the H100 (9850 draws rejected for 276 kept) and left persistent GEMM rows checked on their edge cases only."""

import math

import pytest
import torch

from autotune import gpu
from autotune.gate.verify import draw_problems, verify
from autotune.kernels.fused_softmax.softmax import SPEC as SOFTMAX
from autotune.kernels.gemm.matmul import MATMUL
from autotune.kernels.norm.group_norm import SPEC as GROUP_NORM
from autotune.kernels.norm.layer_norm import LAYER_NORM
from autotune.search_spaces.gemm_gluon import TRITON
from autotune.search_spaces.layer_norm import row_shape
from autotune.search_spaces.matmul import H100_SMS, tiles
from autotune.search_spaces.softmax import row_shape as softmax_rows

SINGLE_1024 = {"variant": "single", "BLOCK_SIZE": 1024, "ROWS_PER_PROGRAM": 1, "num_warps": 4, "num_stages": 1}


def test_a_single_pass_config_is_checked_on_rows_of_its_own_block_and_its_edges():
    result = verify(SOFTMAX, SINGLE_1024, torch.float32, examples=40, seed=5)
    lengths = {softmax_rows(p)[1] for p in result.problems}
    assert result.passed and result.examples >= 40
    assert all(512 < n <= 1024 for n in lengths), sorted(lengths)
    assert {513, 1023, 1024} & lengths and len(lengths) > 10  # the band's ends come up, and sizes between
    assert result.skipped < result.examples  # before: about 35 draws thrown away for each one kept


def test_a_default_config_is_checked_on_every_kind_of_row():
    default = SOFTMAX.space.default
    lengths = {softmax_rows(p)[1] for p in draw_problems(SOFTMAX, default, torch.float32, examples=60, seed=5)}
    assert min(lengths) <= 16 and max(lengths) > 1024


def test_a_looped_norm_config_is_checked_on_rows_longer_than_its_block():
    looped = {"variant": "looped", "BLOCK_N": 256, "ROWS_PER_PROGRAM": 1, "num_warps": 4, "num_stages": 2}
    problems = draw_problems(LAYER_NORM, looped, torch.float32, examples=40, seed=5)
    assert len(problems) >= 40 and all(row_shape(p)[1] > 256 for p in problems)
    assert any(p["norm_dims"] == 2 for p in problems)  # rows over two normalized dims are drawn too


def test_a_single_group_norm_config_is_checked_on_groups_of_its_tile():
    single = {"variant": "single", "BLOCK": 256, "SPLIT": 1, "num_warps": 2, "num_stages": 1}
    problems = draw_problems(GROUP_NORM, single, torch.float32, examples=40, seed=5)
    assert len(problems) >= 40 and all(GROUP_NORM.space.rejects(single, p) is None for p in problems)
    assert len({len(p["shape"]) for p in problems}) > 1  # the group's positions split over spatial dims


def test_a_persistent_gemm_tile_is_checked_where_it_has_more_tiles_than_sms(monkeypatch):
    """On a GPU the draws for it may be larger than plain draws (the interpreter keeps plain sizes)."""
    monkeypatch.setattr(gpu, "interpreter_active", lambda: False)  # draws only: nothing is launched
    persistent = {
        "variant": "persistent",
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 32,
        "GROUP_M": 8,
        "num_warps": 8,
        "num_stages": 3,
        "SPLIT_K": 1,
        **TRITON,
    }
    problems = draw_problems(MATMUL, persistent, torch.float16, examples=30, seed=5)
    assert len(problems) >= 30
    assert all(MATMUL.space.rejects(persistent, p) is None and tiles(persistent, p) > H100_SMS for p in problems)
    assert max(p["m"] * p["n"] for p in problems) > 1 << 20 > min(p["m"] * p["n"] for p in problems) // 4


@pytest.mark.parametrize("examples", [25])
def test_steered_draws_are_the_same_for_the_same_seed(examples):
    """What db verify compiles ahead must be what verify then checks."""
    first = draw_problems(SOFTMAX, SINGLE_1024, torch.float16, examples=examples, seed=9)
    assert first == draw_problems(SOFTMAX, SINGLE_1024, torch.float16, examples=examples, seed=9)
    assert math.prod(first[0]["shape"]) >= 513
