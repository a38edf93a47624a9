"""The fused softmax: matches torch.softmax in every layout and dtype, every valid config passes the gate,
the search space rejects what cannot or should not run, and bad arguments fail before any launch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import find, settings

from autotune import runtime
from autotune.gate.verify import verify
from autotune.kernels import softmax
from autotune.kernels.fused_softmax.softmax import SPEC
from autotune.search_spaces.softmax import SPACE, bucket

pytestmark = [
    # Public calls read a fresh, empty user database, so they run the default config.
    pytest.mark.usefixtures("user_db"),
    # Masked-off row slots and all -inf rows compute NaN on purpose; the interpreter's numpy says so.
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INF = float("inf")


def problem(shape, dim=-1, layout="contiguous", magnitude=1.0, neg_inf="none"):
    return {"shape": list(shape), "dim": dim, "layout": layout, "magnitude": magnitude, "neg_inf": neg_inf}


def config(**overrides):
    return SPACE.with_overrides(**overrides)


SINGLE_16 = config(variant="single", BLOCK_SIZE=16, ROWS_PER_PROGRAM=4, num_warps=2, num_stages=1)
SINGLE_128 = config(variant="single", BLOCK_SIZE=128, ROWS_PER_PROGRAM=2, num_warps=4, num_stages=1)
ONLINE_16 = config(variant="online", BLOCK_SIZE=16, ROWS_PER_PROGRAM=2, num_warps=1, num_stages=3)

# Problems each config applies to, with the cases that break kernels: -inf rows and entries, large
# magnitudes, both strided layouts, a softmax dim in the middle, and rows that end mid-block.
EDGE = {
    "default": [
        problem([3, 1]),
        problem([2, 5, 7], dim=1, layout="transposed", neg_inf="some"),
        problem([6, 33], dim=0, layout="sliced", magnitude=1e4, neg_inf="row"),
        problem([2, 3000], layout="transposed", neg_inf="prefix"),
    ],
    "single_16": [problem([5, 16], neg_inf="row"), problem([7, 3, 2], dim=0, layout="sliced", magnitude=1e4)],
    "single_128": [problem([3, 100], layout="sliced", neg_inf="some"), problem([127, 3], dim=0, layout="transposed")],
    "online_16": [
        problem([3, 50], neg_inf="prefix"),
        problem([5, 17], dim=-1, layout="transposed", magnitude=1e4, neg_inf="row"),
        problem([33, 2, 2], dim=0, layout="sliced"),
    ],
}
CONFIGS = {"default": dict(SPACE.default), "single_16": SINGLE_16, "single_128": SINGLE_128, "online_16": ONLINE_16}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("name", CONFIGS)
def test_configs_pass_the_gate(name, dtype):
    assert [SPACE.rejects(CONFIGS[name], p) for p in EDGE[name]] == [None] * len(EDGE[name])
    result = verify(SPEC, CONFIGS[name], dtype, examples=12, max_numel=128, seed=1, extra_problems=EDGE[name])
    assert result.passed, result.failure and result.failure.describe()


def test_online_keeps_finite_values_after_a_block_of_only_minus_inf():
    # The running max is -inf for the whole first block: an unguarded rescale would make the sum NaN.
    x = torch.randn(2, 40)
    x[:, :20] = -INF
    x[1, 30:] = -INF
    out = torch.full_like(x, float("nan"))
    SPEC.launch({"x": x, "dim": -1}, ONLINE_16, out)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    assert bool((out[:, :20] == 0).all())


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_matches_torch_on_every_dim_of_a_3d_tensor(dim):
    x = torch.randn(4, 6, 5) * 3
    torch.testing.assert_close(softmax(x, dim), torch.softmax(x, dim))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_keeps_the_input_dtype(dtype):
    x = torch.randn(3, 37).to(dtype)
    y = softmax(x)
    assert y.dtype == dtype
    torch.testing.assert_close(y, torch.softmax(x, -1))


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(7, 9).t(),  # 2-D, dim=-1 strided by columns
        lambda: torch.randn(5, 12)[:, ::3],  # stride 3 within rows
        lambda: torch.randn(3, 4, 10).permute(2, 0, 1),  # no 2-D view: read through a copy
        lambda: torch.randn(1, 11).expand(4, 11),  # every row the same memory
    ],
    ids=["transposed", "sliced", "permuted", "expanded"],
)
@pytest.mark.parametrize("dim", [0, -1])
def test_matches_torch_on_non_contiguous_input(make, dim):
    x = make()
    torch.testing.assert_close(softmax(x, dim), torch.softmax(x, dim))


def test_rows_of_minus_inf_give_nan_and_minus_inf_entries_give_zero():
    x = torch.randn(4, 50)
    x[1] = -INF
    x[2, ::3] = -INF
    y = softmax(x)
    assert bool(y[1].isnan().all())
    assert bool((y[2, ::3] == 0).all())
    torch.testing.assert_close(y[[0, 2, 3]], torch.softmax(x, -1)[[0, 2, 3]])


def test_large_magnitudes_do_not_overflow():
    x = torch.randn(3, 200) * 1e4
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1))


@pytest.mark.parametrize("shape,dim", [((5, 1), -1), ((1,), 0), ((), 0), ((), -1)])
def test_single_element_rows_are_one(shape, dim):
    x = torch.randn(shape)
    y = softmax(x, dim)
    assert y.shape == x.shape
    assert bool((y == 1).all())


@pytest.mark.parametrize("shape,dim", [((0,), 0), ((3, 0), -1), ((3, 0), 0), ((0, 4, 2), 1)])
def test_empty_tensors_give_empty_results(shape, dim):
    x = torch.randn(shape)
    with runtime.record_launches() as launches:
        y = softmax(x, dim)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert launches == []


def test_public_call_launches_the_config_of_its_bucket():
    with runtime.record_launches() as launches:
        softmax(torch.randn(3, 20))
    assert launches == [("softmax", dict(SPACE.default))]


def test_default_computes_rows_of_128k():
    x = torch.randn(2, 131072) * 10
    x[1, :70000] = -INF
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1))


@pytest.mark.parametrize("m", [1, 3, 4096])
@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 1000, 1024, 1025, 4096, 65537, 131072, 200000])
def test_default_runs_on_every_problem(m, n):
    assert SPACE.rejects(dict(SPACE.default), problem([m, n])) is None
    assert SPACE.rejects(dict(SPACE.default), problem([n, m], dim=0)) is None


def test_single_takes_exactly_the_row_rounded_up():
    for n, block in [(1, 16), (16, 16), (17, 32), (1000, 1024), (1024, 1024), (131072, 131072)]:
        fits = config(variant="single", BLOCK_SIZE=block, num_warps=max(1, block // 4096), num_stages=1)
        assert SPACE.rejects(fits, problem([1, n])) is None, n
        assert "single needs BLOCK_SIZE" in SPACE.rejects(fits, problem([1, n + block]))
        if block > 16:
            assert "single needs BLOCK_SIZE" in SPACE.rejects(fits, problem([1, block // 2]))


def test_online_is_for_rows_longer_than_its_block():
    online = config(BLOCK_SIZE=256, num_stages=1)
    assert SPACE.rejects(online, problem([1, 257])) is None
    assert "holds the whole row" in SPACE.rejects(online, problem([1, 256]))
    assert "holds the whole row" in SPACE.rejects(config(num_warps=8), problem([1, 1000]))


@pytest.mark.parametrize(
    "overrides,n,m,reason",
    [
        (dict(variant="single", BLOCK_SIZE=64, num_stages=2), 64, 1, "no loop to pipeline"),
        (dict(BLOCK_SIZE=8192, num_warps=1), 100000, 1, "elements per thread"),
        (dict(BLOCK_SIZE=1024, ROWS_PER_PROGRAM=16, num_warps=2), 5000, 64, "elements per thread"),
        (dict(BLOCK_SIZE=16, num_warps=2), 100, 1, "idle warps"),
        (dict(variant="single", BLOCK_SIZE=16, ROWS_PER_PROGRAM=2, num_warps=2, num_stages=1), 16, 2, "idle warps"),
        (dict(BLOCK_SIZE=8192, ROWS_PER_PROGRAM=2, num_warps=32), 100000, 64, "ROWS_PER_PROGRAM > 1 needs"),
        (dict(BLOCK_SIZE=64, ROWS_PER_PROGRAM=8), 100, 4, "exceeds the number of rows"),
    ],
)
def test_constraints_reject_configs_that_should_not_run(overrides, n, m, reason):
    rejected = config(**overrides)
    assert reason in (SPACE.rejects(rejected, problem([m, n])) or "")


def test_constraints_keep_good_configs_and_depend_only_on_the_bucket():
    big = problem([4096, 32768])
    assert SPACE.rejects(config(BLOCK_SIZE=4096, ROWS_PER_PROGRAM=2, num_warps=8, num_stages=4), big) is None
    assert SPACE.rejects(config(variant="single", BLOCK_SIZE=32768, num_warps=32, num_stages=1), big) is None
    assert len(SPACE.grid_for(big)) == len(SPACE.grid_for(problem([2049, 16385]))) > 100
    assert SPACE.grid_for(problem([1, 8])) == [
        config(variant="single", BLOCK_SIZE=16, ROWS_PER_PROGRAM=1, num_warps=1, num_stages=1),
        dict(SPACE.default),
    ]


def test_bad_arguments_fail_before_any_launch():
    with runtime.record_launches() as launches:
        with pytest.raises(TypeError, match="x must have a floating dtype"):
            softmax(torch.arange(6).reshape(2, 3))
        with pytest.raises(TypeError, match="x must be a torch.Tensor"):
            softmax([1.0, 2.0])
        with pytest.raises(IndexError, match="dim=2 is out of range"):
            softmax(torch.randn(2, 3), dim=2)
        with pytest.raises(IndexError, match="dim=-3 is out of range"):
            softmax(torch.randn(2, 3), dim=-3)
        with pytest.raises(IndexError, match="dim=1 is out of range"):
            softmax(torch.tensor(1.0), dim=1)
        with pytest.raises(TypeError, match="dim must be an int"):
            softmax(torch.randn(2, 3), dim=1.0)
    assert launches == []


def test_shapes_buckets_presets_and_cost():
    assert SPEC.parse_shape("4096x8192")["shape"] == [4096, 8192]
    assert SPEC.parse_shape("4096x8192")["dim"] == -1
    assert SPEC.parse_shape("8x128x1000")["shape"] == [8, 128, 1000]
    with pytest.raises(ValueError, match="4096xabc"):
        SPEC.parse_shape("4096xabc")
    assert bucket(problem([8, 128, 1000])) == "m=1024,n=1024"
    assert bucket(problem([3, 5, 7], dim=1)) == "m=32,n=8"
    assert [SPEC.bucket(p) for p in SPEC.presets] == [
        "m=4096,n=1024",
        "m=4096,n=4096",
        "m=4096,n=8192",
        "m=4096,n=16384",
        "m=4096,n=32768",
        "m=1024,n=131072",
    ]
    cost = SPEC.cost(problem([4096, 1024]), torch.bfloat16)
    assert (cost.bytes, cost.flops) == (2 * 4096 * 1024 * 2, 5 * 4096 * 1024)


@pytest.mark.parametrize(
    "wanted",
    [
        lambda p: p["shape"][p["dim"]] == 1,
        lambda p: p["shape"][p["dim"]] in (127, 251, 509, 1021),
        lambda p: p["shape"][p["dim"]] > 1024 and p["shape"][p["dim"]] % 1024,
        lambda p: 0 in p["shape"],
        lambda p: p["dim"] < 0 and len(p["shape"]) >= 3,
        lambda p: p["neg_inf"] == "row" and p["layout"] == "transposed",
    ],
    ids=["n=1", "prime", "partial-last-block", "empty", "negative-dim", "inf-row"],
)
def test_problems_reach_the_edge_cases(wanted):
    found = find(SPEC.problems(1 << 16), wanted, settings=settings(max_examples=2000, database=None, derandomize=True))
    assert wanted(found)


def test_make_inputs_builds_the_layout_and_infinities_it_names():
    x = SPEC.make_inputs(
        problem([6, 10], dim=0, layout="sliced", neg_inf="row"), torch.float16, torch.device("cpu"), 0
    )["x"]
    assert x.dtype == torch.float16 and x.stride() == (20, 2)
    assert int(x.isinf().all(dim=0).sum()) == 1
    x = SPEC.make_inputs(
        problem([6, 10], layout="transposed", neg_inf="prefix"), torch.float32, torch.device("cpu"), 0
    )["x"]
    assert x.stride() == (1, 6)
    assert bool(x[:, :5].isneginf().all()) and bool(x[:, 5:].isfinite().all())
