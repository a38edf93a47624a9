"""group_norm's forward "cached" variant: the two-pass kernel with its statistics pass asking L2 to keep the group
for the normalize pass (one read from memory where the groups in flight fit L2), a kernel of its own beside the
first three. It computes exactly what "looped" computes, passes the float64 gate on edge shapes and layouts, is
drawn per bucket beside single (the group in registers, one read), looped and split only where a group is tiled
and fits its share of L2, a stored row of it is what the public call launches, and the backward's space does not
offer it."""

from __future__ import annotations

import optuna
import pytest
import torch
from stored_rows import store_best

from autotune import runtime
from autotune.gate.compare import outputs_like
from autotune.gate.verify import verify
from autotune.kernels import group_norm
from autotune.kernels.norm.group_norm import SPEC
from autotune.search_spaces.group_norm import BACKWARD_SPACE, MAX_CACHED_GROUP, SPACE

pytestmark = [pytest.mark.usefixtures("user_db"), pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def problem(shape, groups, layout="contiguous", activation="silu", affine="both", values="random",
            magnitude=1.0, scale=1.0, eps=1e-5):  # fmt: skip
    return {"shape": list(shape), "groups": groups, "layout": layout, "activation": activation, "affine": affine,
            "values": values, "magnitude": magnitude, "scale": scale, "eps": eps}  # fmt: skip


CACHED = SPACE.with_overrides(variant="cached", BLOCK=16, num_warps=1, num_stages=2)
EDGES = [
    problem([1, 6, 5, 7], 2, "channels_last", "mish", values="constant", scale=30.0),
    problem([2, 3, 41], 1, "permuted", "silu", "weight", "offset"),  # a prime spatial size
    problem([2, 4, 37], 4, "sliced", "none", "bias", magnitude=1e4, eps=1e-2),  # groups of one channel
    problem([3, 6, 1, 19], 3, "contiguous", "silu"),  # a spatial dim of 1
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_cached_passes_the_float64_gate(dtype):
    assert [SPACE.rejects(CACHED, p) for p in EDGES] == [None] * len(EDGES)
    result = verify(SPEC, CACHED, dtype, examples=4, max_numel=256, seed=3, extra_problems=EDGES)
    assert result.passed and result.examples >= len(EDGES), result.failure and result.failure.describe()


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
def test_cached_computes_what_looped_computes_bit_for_bit(layout):
    inputs = SPEC.make_inputs(problem([2, 8, 9, 5], 2, layout, "silu"), torch.float16, torch.device("cpu"), 0)
    outs = []
    for variant in ("looped", "cached"):
        out = outputs_like(SPEC.baseline(inputs))
        SPEC.launch(inputs, {**CACHED, "variant": variant}, out)
        outs.append(out)
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


def test_the_public_call_launches_a_stored_cached_row(user_db):
    x = torch.randn(2, 8, 6, 6)
    stored = SPACE.with_overrides(variant="cached", BLOCK=32, num_warps=1, num_stages=2)
    store_best(user_db, SPEC, SPEC.bucket(problem(list(x.shape), 2)), stored)
    with runtime.record_launches() as launches:
        y = group_norm(x, 2, activation="silu")
    assert launches == [("group_norm", stored)]
    torch.testing.assert_close(y, torch.nn.functional.silu(torch.nn.functional.group_norm(x, 2)))


def test_cached_only_where_a_group_is_tiled_and_fits_its_share_of_l2():
    goal = problem([8, 512, 64, 64], 32)  # groups of 16 x 4096 = 65536 elements
    assert SPACE.rejects(SPACE.with_overrides(variant="cached", BLOCK=16384, num_warps=16), goal) is None
    whole = SPACE.with_overrides(variant="cached", BLOCK=65536, num_warps=16)
    assert "holds the whole group" in SPACE.rejects(whole, goal)
    huge = problem([1, 64, 256, 256], 2)  # groups of 32 x 65536
    assert "at most" in SPACE.rejects(SPACE.with_overrides(variant="cached", BLOCK=16384, num_warps=16), huge)
    assert MAX_CACHED_GROUP < 32 * 65536
    split = SPACE.with_overrides(variant="cached", BLOCK=16384, SPLIT=2, num_warps=16)
    assert "SPLIT must be 1" in SPACE.rejects(split, goal)
    # One read in registers stays offered too, and the two-pass kernels.
    assert {c["variant"] for c in SPACE.grid_for(goal)} == {"single", "looped", "split", "cached", "onepass"}


def test_a_search_draws_cached_for_the_forward_only():
    assert "cached" not in dict((p.name, p.values) for p in BACKWARD_SPACE.params)["variant"]
    p = problem([8, 512, 64, 64], 32)
    drawn = {}
    for name, space in (("forward", SPACE), ("backward", BACKWARD_SPACE)):  # one study each, as a search runs
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
        drawn[name] = [space.suggest(study.ask(), p) for _ in range(40)]
    assert {c["variant"] for c in drawn["forward"]} == {"single", "looped", "split", "cached", "onepass"}
    assert any(c["variant"] == "cached" and SPACE.rejects(c, p) is None for c in drawn["forward"])
    assert "cached" not in {c["variant"] for c in drawn["backward"]}
