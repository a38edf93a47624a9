"""flash_attn's search spaces and problems: the defaults run everywhere, constraints reject what cannot run
or only wastes a trial and depend on nothing but the bucket, the samplers draw only what a problem can
use, and forward searches start from the tiles measured best for the head dim; Hypothesis reaches every
correctness case; shapes, buckets, presets, edges and costs are as named."""

from __future__ import annotations

import math

import optuna
import pytest
import torch
from hypothesis import given, settings

import autotune
from autotune.engine.warm_starts import warm_starts
from autotune.identity import RowKey
from autotune.kernels.attention import problems as problems_
from autotune.kernels.attention.flash_attn import SPEC as FORWARD
from autotune.kernels.attention.flash_attn_backward import SPEC as BACKWARD
from autotune.search_spaces import flash_attn as space_
from autotune.search_spaces.flash_attn import BACKWARD_SPACE, FORWARD_SPACE, bucket
from autotune.spec import DTYPE_NAMES

problem = problems_.problem
EXTREMES = [
    problem(1, 1, 1, 1),
    problem(1, 1, 1, 256, nk=131072),
    problem(64, 32, 16384, 256, causal=True),
    problem(2, 32, 1, 128, kv_heads=2, nk=65536),
    problem(1, 4, 3000, 80, kv_heads=1, nk=7, causal=True),
    problem(0, 1, 0, 16, nk=0),
]


@pytest.mark.parametrize("p", EXTREMES, ids=bucket)
def test_defaults_run_on_every_problem(p):
    assert FORWARD_SPACE.rejects(dict(FORWARD_SPACE.default), p) is None
    assert BACKWARD_SPACE.rejects(dict(BACKWARD_SPACE.default), p) is None


@pytest.mark.parametrize(
    "space, overrides, p, reason",
    [
        (FORWARD_SPACE, dict(BLOCK_M=128, num_warps=8), problem(1, 1, 40, 64), "BLOCK_M exceeds the query rows"),
        (FORWARD_SPACE, dict(BLOCK_M=128, num_warps=8, gqa="packed"), problem(1, 4, 40, 64, kv_heads=1), None),
        (FORWARD_SPACE, dict(BLOCK_N=256, num_warps=8), problem(1, 1, 512, 64, nk=100), "BLOCK_N exceeds Nk"),
        (
            FORWARD_SPACE,
            dict(BLOCK_M=256, BLOCK_N=256, num_warps=8, num_stages=4),
            problem(1, 1, 4096, 256),
            "shared memory",
        ),
        (
            FORWARD_SPACE,
            dict(BLOCK_M=256, BLOCK_N=256, num_warps=2, num_stages=1),
            problem(1, 1, 4096, 128),
            "values per thread",
        ),
        (FORWARD_SPACE, dict(BLOCK_M=16, BLOCK_N=16), problem(1, 1, 64, 64), "idle warps"),
        (FORWARD_SPACE, dict(KV_SPLITS=4), problem(16, 16, 4096, 64), "programs already"),
        (
            FORWARD_SPACE,
            dict(KV_SPLITS=64, BLOCK_M=16, BLOCK_N=64),
            problem(1, 1, 1, 64, nk=2048),
            "splits without a key block",
        ),
        (FORWARD_SPACE, dict(gqa="packed"), problem(1, 4, 64, 64), "needs grouped-query attention"),
        (FORWARD_SPACE, dict(combine="last_split"), problem(1, 4, 1, 64, nk=4096), "needs KV_SPLITS > 1"),
        (
            FORWARD_SPACE,
            dict(combine="last_split", KV_SPLITS=64, BLOCK_M=16, BLOCK_N=16),
            problem(1, 4, 1, 64, nk=4096),
            "KV_SPLITS at most 32",
        ),
        (FORWARD_SPACE, dict(BLOCK_N=64, num_stages=3), problem(1, 1, 64, 64, nk=60), "nothing to pipeline"),
        (BACKWARD_SPACE, dict(BLOCK_N=128, num_warps=8), problem(1, 1, 40, 64), "BLOCK_N exceeds Nq and Nk"),
        (BACKWARD_SPACE, dict(BLOCK_N=128, BLOCK_M=128, num_warps=2), problem(1, 1, 4096, 256), "values per thread"),
        (
            BACKWARD_SPACE,
            dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=5),
            problem(1, 1, 4096, 128),
            "shared memory",
        ),
    ],
)
def test_constraints_reject_what_cannot_run_or_only_wastes_a_trial(space, overrides, p, reason):
    got = space.rejects(space.with_overrides(**overrides), p)
    assert got is None if reason is None else reason in (got or ""), got


def test_descriptors_run_under_the_interpreter():
    assert space_.descriptors_supported()
    p = problem(1, 1, 64, 64)
    assert FORWARD_SPACE.rejects(FORWARD_SPACE.with_overrides(kv_load="descriptor"), p) is None


@pytest.mark.parametrize(
    "a, b",
    [
        (problem(4, 16, 4096, 128, causal=True), problem(3, 12, 2049, 128, nk=4000, causal=True)),
        (problem(2, 16, 1, 128, kv_heads=4, nk=32768), problem(1, 28, 1, 128, kv_heads=7, nk=16385)),
    ],
)
def test_constraints_depend_only_on_the_bucket(a, b):
    assert bucket(a) == bucket(b)
    for space in (FORWARD_SPACE, BACKWARD_SPACE):
        assert [c for c in space.grid() if space.rejects(c, a)] == [c for c in space.grid() if space.rejects(c, b)]


@pytest.mark.parametrize(
    "p",
    [
        problem(4, 16, 4096, 128, causal=True),
        problem(2, 16, 1, 128, kv_heads=4, nk=32768),
        problem(1, 2, 40, 80, nk=300),
    ],
    ids=bucket,
)
def test_suggestions_are_valid_and_draw_only_what_the_problem_can_use(p):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    group = p["heads"] // p["kv_heads"]
    drawn = [FORWARD_SPACE.suggest(study.ask(), p) for _ in range(40)]
    assert all(d["BLOCK_M"] <= max(16, math.prod((problems_.next_pow2(p["nq"]), group))) for d in drawn)
    assert {d["gqa"] for d in drawn} == ({"per_head", "packed"} if group > 1 else {"per_head"})
    assert {d["p"] for d in drawn} == {"rounded", "split"}
    splits = {d["KV_SPLITS"] for d in drawn}
    assert splits == {1} if p["nq"] > 1 and p["batch"] * p["heads"] > 8 else len(splits) > 1
    merges = {d["combine"] for d in drawn if d["KV_SPLITS"] > 1}
    assert merges == (set() if splits == {1} else {"kernel", "last_split"})
    assert all(d["combine"] == "kernel" for d in drawn if d["KV_SPLITS"] == 1)
    runnable = [d for d in drawn if FORWARD_SPACE.rejects(d, p) is None]
    assert len(runnable) >= 5
    backward = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))  # a study per kernel, as search() has
    drawn = [BACKWARD_SPACE.suggest(backward.ask(), p) for _ in range(20)]  # each validated against the space
    assert {d["delta"] for d in drawn} == {"output", "recomputed"} and {d["dq"] for d in drawn} == {
        "separate",
        "atomic",
    }
    assert {d["ds"] for d in drawn} == {"rounded", "split"}


EDGE_CASES = {
    "N=1": lambda p: p["nq"] == p["nk"] == 1,
    "decode against many keys": lambda p: p["nq"] == 1 and p["nk"] >= 500,
    "no block divides N": lambda p: p["nq"] % 16 and p["nk"] % 16 and p["nq"] > 16,
    "causal Nq < Nk": lambda p: p["causal"] and 1 < p["nq"] < p["nk"],
    "causal Nq > Nk": lambda p: p["causal"] and p["nq"] > p["nk"] > 1,
    "large logits": lambda p: p["magnitude"] == problems_.LARGE,
    "custom scale": lambda p: p["scale"] is not None,
    "GQA": lambda p: p["heads"] > p["kv_heads"],
    "every head dim": lambda p: False,
    "empty": lambda p: 0 in (p["batch"], p["nq"], p["nk"]),
    "transposed layout": lambda p: p["layout"] == "bnhd",
}


def test_problems_reach_the_correctness_cases():
    seen, head_dims = set(), set()

    @settings(max_examples=400, database=None, derandomize=True)
    @given(FORWARD.problems(1 << 13))
    def draw(p):
        b, h, hk, nq, nk = p["batch"], p["heads"], p["kv_heads"], p["nq"], p["nk"]
        assert b * h * nq * nk <= 1 << 13 and h % hk == 0
        head_dims.add(p["head_dim"])
        seen.update(name for name, wanted in EDGE_CASES.items() if wanted(p))

    draw()
    assert head_dims >= set(problems_.HEAD_DIMS)
    assert seen | {"every head dim"} == set(EDGE_CASES)


def test_make_inputs_builds_the_layouts_and_options_it_names():
    cpu = torch.device("cpu")
    inputs = FORWARD.make_inputs(
        problem(2, 4, 5, 32, kv_heads=2, nk=7, layout="bnhd", scale=0.3), torch.float16, cpu, 0
    )
    assert inputs["q"].shape == (2, 4, 5, 32) and inputs["q"].stride() == (5 * 4 * 32, 32, 4 * 32, 1)
    assert inputs["k"].shape == (2, 2, 7, 32) and inputs["enable_gqa"] and inputs["scale"] == 0.3
    inputs = FORWARD.make_inputs(problem(1, 1, 5, 80, layout="padded"), torch.float32, cpu, 0)
    assert inputs["v"].stride() == (5 * 88, 5 * 88, 88, 1) and inputs["scale"] == 1 / math.sqrt(80)
    inputs = BACKWARD.make_inputs(problem(1, 2, 3, 16, causal=True), torch.bfloat16, cpu, 0)
    assert inputs["o"].dtype == torch.bfloat16 and inputs["lse"].dtype == torch.float32 and inputs["is_causal"]
    assert BACKWARD.make_inputs(problem(1, 2, 3, 16), torch.float32, cpu, 0)["lse"].dtype == torch.float64


def test_shapes_buckets_presets_and_cost():
    assert FORWARD.parse_shape("4x16x4096x128+causal") == problem(4, 16, 4096, 128, causal=True)
    assert FORWARD.parse_shape("2x16/4x1:32768x128") == problem(2, 16, 1, 128, kv_heads=4, nk=32768)
    for bad, message in [
        ("4x16x128", "expected BxHxNxD"),
        ("4x16x8x128+gelu", "only suffix"),
        ("1x6/4x8x64", "multiple of key/value heads"),
        ("1x1x8x512", "head dim"),
    ]:
        with pytest.raises(ValueError, match=message):
            FORWARD.parse_shape(bad)
    assert (
        bucket(problem(3, 12, 1000, 80, kv_heads=4, nk=3000, causal=True)) == "bh=64,g=3,nq=1024,nk=4096,d=80,causal=1"
    )
    presets = FORWARD.presets
    assert len(presets) == 22 and all(p["batch"] * p["nq"] == 16384 for p in presets[:20])
    assert {(p["head_dim"], p["causal"]) for p in presets[:20]} == {(64, False), (64, True), (128, False), (128, True)}
    assert [p["nq"] for p in presets[20:]] == [1, 1] and presets[21]["kv_heads"] == 4
    assert all(
        autotune.get(n).presets_here() == problems_.INTERPRETER_PRESETS for n in ("flash_attn", "flash_attn_backward")
    )
    square = problem(1, 16, 16384, 128)
    # FlashAttention's count: 4 * B * H * N^2 * D, half when causal, 2.5 times that backward.
    assert FORWARD.cost(square, torch.bfloat16).flops == 4 * 16 * 16384**2 * 128
    assert FORWARD.cost({**square, "causal": True}, torch.bfloat16).flops == 2 * 16 * 16384**2 * 128
    assert BACKWARD.cost(square, torch.bfloat16).flops == 2.5 * FORWARD.cost(square, torch.bfloat16).flops
    assert FORWARD.cost(square, torch.bfloat16).bytes == 4 * 16 * 16384 * 128 * 2 + 16 * 16384 * 4


def test_bucket_edges_stay_in_the_bucket_and_cross_the_lengths():
    p = problem(1, 16, 16384, 128, causal=True)
    edges = FORWARD.bucket_edges(p)
    assert {bucket(e) for e in edges} == {bucket(p)}
    assert any(e["nq"] < e["nk"] for e in edges) and any(e["nq"] > e["nk"] for e in edges)
    assert {e["layout"] for e in edges} == {"contiguous", "bnhd", "padded"}
    assert max(e["magnitude"] for e in FORWARD.bucket_edges(p)) == problems_.LARGE
    assert max(e["magnitude"] for e in BACKWARD.bucket_edges(p)) == problems_.BACKWARD_LARGE
    decode = problems_.parse_shape("2x16/4x1:32768x128")
    assert {bucket(e) for e in FORWARD.bucket_edges(decode)} == {bucket(decode)}


def _tiles(configs):
    return [(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"]) for c in configs]


def test_searches_start_from_the_tiles_measured_best_for_the_head_dim():
    # The head dim 64 rows searched without these settled 6-20% slower (twenty-fourth session's sweep).
    d64 = FORWARD.problem_for(problem(4, 16, 4096, 64), torch.bfloat16)
    d128 = FORWARD.problem_for(problem(4, 16, 4096, 128, causal=True), torch.float16)
    assert _tiles(FORWARD_SPACE.starts(d64)) == [(64, 128, 4, 2), (128, 64, 4, 3)]
    assert _tiles(FORWARD_SPACE.starts(d128)) == [(128, 64, 4, 2)]
    # Right after the default, before any neighbour's winner.
    starts = warm_starts(
        FORWARD, None, RowKey(FORWARD.name, FORWARD.source_hash, "H100", DTYPE_NAMES[torch.bfloat16], bucket(d64)), d64
    )
    assert starts[:3] == [FORWARD_SPACE.default, *FORWARD_SPACE.starts(d64)]
    # None where they cannot run or were not measured: a decode step (one query row), float32, head dim 256.
    decode = FORWARD.problem_for(problems_.parse_shape("16x16x1:4096x128"), torch.bfloat16)
    assert FORWARD_SPACE.starts(decode) == []
    assert FORWARD_SPACE.starts(FORWARD.problem_for(problem(4, 16, 4096, 64), torch.float32)) == []
    assert FORWARD_SPACE.starts(FORWARD.problem_for(problem(4, 16, 4096, 256), torch.bfloat16)) == []
    assert BACKWARD_SPACE.starts(d64) == []  # the backward's rows are at their sweep's best already
