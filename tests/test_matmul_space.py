"""The GEMM and mlp search spaces: thousands of valid configs on a large bf16 problem, constraints that reject
what cannot fit (shared memory per stage, registers, dtype-specific BLOCK_K) or cannot help (split-K or
persistence where tiles already fill the GPU) before anything compiles, decisions made per bucket, the
default valid everywhere, conditional suggestions; and the problems, shapes, buckets and costs of the
three kernels, down to a search that stores a verified row."""

from __future__ import annotations

import math

import optuna
import pytest
import torch
from hypothesis import given, settings

from autotune.engine.plan import SearchOptions
from autotune.engine.search import search
from autotune.kernels.gemm import problems as problems_
from autotune.kernels.gemm.matmul import LINEAR, MATMUL
from autotune.kernels.gemm.mlp import MLP
from autotune.search_spaces import matmul as space_
from autotune.search_spaces import mlp as mlp_space
from autotune.search_spaces.matmul import SPACE
from autotune.spec import shape_label

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def config(**overrides) -> dict:
    return SPACE.with_overrides(**overrides)


def gemm(m, n, k, dtype="bf16", batch=0) -> dict:
    return {"m": m, "n": n, "k": k, "batch": batch, "dtype": dtype}


def test_thousands_of_valid_configs_at_4096_cubed_in_bf16_fewer_in_fp32():
    bf16 = SPACE.grid_for(gemm(4096, 4096, 4096))
    fp32 = SPACE.grid_for(gemm(4096, 4096, 4096, "fp32"))
    assert len(bf16) == 3600 and len(fp32) < len(bf16)
    assert {c["variant"] for c in bf16} == set(space_.VARIANTS)
    assert {c["BLOCK_K"] for c in bf16} == {32, 64, 128} and {c["BLOCK_K"] for c in fp32} == {16, 32, 64}
    assert {c["SPLIT_K"] for c in bf16} == {1}  # 4096^2 outputs fill the GPU without splitting K


@pytest.mark.parametrize(
    "overrides, problem, reason",
    [
        (
            dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=4),
            gemm(4096, 4096, 4096),
            "shared memory",
        ),
        (dict(BLOCK_M=256, BLOCK_N=256, num_warps=8), gemm(4096, 4096, 4096), "accumulator registers"),
        (dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4), gemm(4096, 4096, 4096, "fp32"), "operand slices"),
        (dict(BLOCK_K=16), gemm(4096, 4096, 4096), "BLOCK_K in 32..128 for bf16"),
        (dict(BLOCK_K=128), gemm(4096, 4096, 4096, "fp32"), "BLOCK_K in 16..64 for fp32"),
        (dict(BLOCK_M=128, BLOCK_N=64), gemm(64, 4096, 4096), "larger than the problem"),
        (dict(BLOCK_M=32), gemm(4096, 4096, 4096), "too little operand reuse"),
        (dict(SPLIT_K=2), gemm(4096, 4096, 4096), "the tiles alone keep"),
        (dict(variant="persistent", SPLIT_K=2, GROUP_M=1), gemm(64, 64, 4096), "split-K is for the grid variants"),
        (dict(variant="persistent"), gemm(512, 512, 512), "one tile per program"),
        (dict(GROUP_M=16, BLOCK_M=128), gemm(1024, 1024, 1024), "GROUP_M > the tiles along M"),
        (dict(GROUP_M=4, BLOCK_N=64), gemm(1024, 64, 1024), "one tile along N"),
        (dict(num_stages=5, BLOCK_K=64, GROUP_M=1), gemm(64, 64, 100), "loads that never happen"),
        (dict(num_warps=8, BLOCK_M=16, BLOCK_N=64), gemm(16, 4096, 4096), "idle warps"),
    ],
)
def test_constraints_reject_configs_that_cannot_fit_or_help(overrides, problem, reason):
    assert reason in (SPACE.rejects(config(**overrides), problem) or "")


def test_split_k_and_persistence_where_they_help():
    few_tiles = gemm(256, 256, 8192)
    assert (
        SPACE.rejects(config(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, SPLIT_K=8, GROUP_M=1, num_warps=8), few_tiles)
        is None
    )
    assert (
        SPACE.rejects(
            config(variant="tma_persistent", BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4),
            gemm(8192, 4096, 14336),
        )
        is None
    )


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_the_default_runs_on_every_problem(dtype):
    for m in (0, 1, 7, 4097, 65536):
        for n, k in [(1, 0), (7, 1), (33, 129), (4097, 65), (16384, 14336)]:
            for batch in (0, 3):
                assert SPACE.rejects(dict(SPACE.default), gemm(m, n, k, dtype, batch)) is None


def test_decisions_are_per_bucket_and_suggestions_stay_in_the_space():
    big, same_bucket = gemm(1024, 1024, 1024), gemm(513, 1000, 600)
    assert SPACE.grid_for(big) == SPACE.grid_for(same_bucket)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trials = [study.ask() for _ in range(300)]
    drawn = [SPACE.suggest(t, big) for t in trials]
    valid = [c for c in drawn if SPACE.rejects(c, big) is None]
    # Draws that do not fit are repaired (warps, stages, GROUP_M, SPLIT_K, persistence), so few are wasted.
    assert len(valid) > 240 and len({str(sorted(c.items())) for c in valid}) > 200
    repaired = [(t.params, c) for t, c in zip(trials, drawn) if t.params["num_warps"] != c["num_warps"]]
    assert repaired and all(SPACE.rejects({**c, "num_warps": params["num_warps"]}, big) for params, c in repaired)
    assert all(c["SPLIT_K"] == 1 for c in drawn if c["variant"].endswith("persistent"))
    tiny = gemm(7, 9, 3, "fp16")  # blocks are drawn up to the bucket's sizes (and the default's)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    assert {SPACE.suggest(study.ask(), tiny)["BLOCK_M"] for _ in range(30)} <= {16, 64}


def test_mlp_space_fuses_only_narrow_outputs():
    goal = {"m": 8192, "k": 4096, "h": 16384, "n": 4096, "dtype": "bf16"}
    narrow = {"m": 4096, "k": 1024, "h": 4096, "n": 256, "dtype": "bf16"}
    assert mlp_space.SPACE.grid_for(goal) == [mlp_space.DEFAULT]
    fused = [c for c in mlp_space.SPACE.grid_for(narrow) if c["variant"] == "fused"]
    assert len(fused) > 100
    assert "shared memory" in mlp_space.SPACE.rejects(
        {
            **mlp_space.DEFAULT,
            "variant": "fused",
            "BLOCK_M": 64,
            "BLOCK_N": 256,
            "BLOCK_H": 128,
            "BLOCK_K": 128,
            "num_warps": 8,
            "num_stages": 4,
        },
        narrow,
    )
    assert "tile parameters are the default's" in mlp_space.SPACE.rejects({**mlp_space.DEFAULT, "BLOCK_M": 16}, narrow)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(40):
        drawn = mlp_space.SPACE.suggest(study.ask(), narrow)
        assert drawn == mlp_space.DEFAULT or drawn["variant"] == "fused"


EDGE_CASES = {
    "k=1": lambda p: p["k"] == 1,
    "issue sizes": lambda p: {p["m"], p["n"]} & {7, 33, 65, 129},
    "batched": lambda p: p["batch"] > 0 and p["broadcast"] == "none",
    "broadcast": lambda p: p["broadcast"] != "none",
    "transposed and sliced": lambda p: {p["a_layout"], p["b_layout"]} == {"transposed", "sliced"},
    "large": lambda p: p["values"] == "large",
}


def test_problems_reach_the_edge_cases_and_stay_small():
    seen, worst = set(), 0

    @settings(max_examples=200, database=None, derandomize=True)
    @given(MATMUL.problems(1 << 13))
    def draw(p):
        nonlocal worst
        seen.update(name for name, wanted in EDGE_CASES.items() if wanted(p))
        worst = max(worst, p["m"] * p["n"] * p["k"] * max(1, p["batch"]))

    draw()
    assert seen == set(EDGE_CASES) and worst <= 3 * problems_.GROWTH * (1 << 13)
    linear_seen = set()

    @settings(max_examples=100, database=None, derandomize=True)
    @given(LINEAR.problems(1 << 13))
    def draw_linear(p):
        assert math.prod(p["lead"] or [p["m"]]) == p["m"]
        linear_seen.add((p["bias"], p["activation"] != "none", bool(p["lead"])))

    draw_linear()
    assert len(linear_seen) == 8  # bias without activation, activation without bias, ... with leading dims or not


def test_inputs_have_the_layouts_and_scales_they_name():
    cpu = torch.device("cpu")
    p = problems_.parse_matmul("3x40x50x60")
    inputs = MATMUL.make_inputs(
        {**p, "broadcast": "b", "a_layout": "transposed", "b_layout": "sliced", "values": "large"},
        torch.float16,
        cpu,
        0,
    )
    a, b = inputs["a"], inputs["b"]
    assert a.shape == (3, 40, 50) and a.stride(1) == 1 and b.shape == (50, 60) and b.stride() == (120, 2)
    assert 1e4 < a.abs().max() < 65504 and torch.isfinite(torch.matmul(a, b)).all()
    inputs = LINEAR.make_inputs(
        {**problems_.parse_linear("6x16x8,bias,silu"), "lead": [2, 3], "w_layout": "transposed"}, torch.float32, cpu, 0
    )
    assert inputs["x"].shape == (2, 3, 16) and inputs["weight"].stride() == (1, 8) and inputs["activation"] == "silu"
    inputs = MLP.make_inputs(problems_.parse_mlp("4x8x32x5,nobias,relu"), torch.float32, cpu, 0)
    assert inputs["b1"] is None and inputs["w2"].shape == (5, 32) and inputs["activation"] == "relu"


def test_shapes_buckets_presets_and_cost():
    goal = MATMUL.parse_shape("8192x4096x14336")  # sizes in the order data flows: M x K x N
    assert (goal["m"], goal["k"], goal["n"], goal["batch"]) == (8192, 4096, 14336, 0)
    assert MATMUL.bucket(MATMUL.parse_shape("4x100x4097x3")) == "m=128,n=4,k=8192,b=4"
    assert LINEAR.parse_shape("8192x4096x16384,bias,gelu_tanh")["activation"] == "gelu_tanh"
    for spec, text in [(LINEAR, "8192x4096x16384,bias,gelu_tanh"), (MATMUL, "2x65x33x129"), (MLP, "8x4x6x2,bias,relu")]:
        assert shape_label(spec.parse_shape(text)) == text  # how the CLI and the benchmarks name a problem
    assert MLP.bucket(MLP.parse_shape("8192x4096x16384x4096")) == "m=8192,k=4096,h=16384,n=4096"
    assert MLP.parse_shape("8x4x6x2")["bias"] and MLP.parse_shape("8x4x6x2,nobias,silu")["activation"] == "silu"
    for bad, spec, match in [
        ("4096x4096", MATMUL, "MxKxN"),
        ("8x8x8,bias", MATMUL, "unknown option"),
        ("8x8x8,relu,silu", LINEAR, "at most one activation"),
        ("8x8x8", MLP, "MxKxHxN"),
    ]:
        with pytest.raises(ValueError, match=match):
            spec.parse_shape(bad)
    assert [MATMUL.bucket(p) for p in MATMUL.presets][:2] == ["m=4096,n=4096,k=4096,b=1", "m=8192,n=8192,k=8192,b=1"]
    cost = MATMUL.cost(problems_.parse_matmul("4096x4096x4096"), torch.bfloat16)
    assert cost.flops == 2 * 4096**3 and cost.bytes == 3 * 4096**2 * 2
    assert MLP.cost(MLP.parse_shape("8x4x6x2"), torch.float32).flops == 2 * 8 * 6 * (4 + 2)
    assert all(MATMUL.bound == s.bound == "compute" for s in (LINEAR, MLP))


def test_bucket_edges_stay_in_the_bucket():
    goal = LINEAR.parse_shape("8192x4096x16384,bias,gelu_tanh")
    for spec, prob in [
        (MATMUL, MATMUL.parse_shape("3x100x4097x30")),
        (LINEAR, goal),
        (MLP, MLP.parse_shape("60x33x70x9")),
    ]:
        edges = spec.bucket_edges(prob)
        assert len(edges) >= 2 and all(spec.bucket(e) == spec.bucket(prob) for e in edges)


def test_search_carries_the_dtype_to_the_constraints_and_stores_a_verified_row(user_db):
    from autotune.db import ConfigStore

    prob = MATMUL.parse_shape("40x50x30")
    with ConfigStore(str(user_db)) as store:
        result = search(MATMUL, prob, torch.float16, SearchOptions(trials=3, examples=2, final_examples=2), store=store)
        rows = store.best_rows(kernel="matmul")
    assert result.problem["dtype"] == "fp16" and result.stored and rows[0].bucket == "m=64,n=32,k=64,b=1"
    assert all(t.config["BLOCK_K"] >= 32 for t in result.trials if t.outcome == "ok")  # fp16's BLOCK_K range
    assert result.evaluations == 3
