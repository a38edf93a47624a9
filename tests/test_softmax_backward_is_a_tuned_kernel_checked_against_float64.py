"""softmax's backward is a tuned kernel of its own (`softmax_backward`): its configs pass the float64 gate on
edge widths and strided layouts, its space holds what fits, and `autotune.kernels.softmax`'s autograd launches
it with the runtime's config, while a backward that records a graph stays differentiable (torch ops)."""

from __future__ import annotations

import pytest
import torch
from stored_rows import store_best

import autotune
from autotune import runtime
from autotune.gate.verify import check_problem, verify
from autotune.kernels import softmax
from autotune.kernels.fused_softmax.softmax_backward import SPEC, backward
from autotune.runtime import registry
from autotune.search_spaces.softmax import BACKWARD_SPACE, SPACE

pytestmark = [
    pytest.mark.usefixtures("user_db"),  # public calls read a fresh, empty user database: the default config
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # all -inf rows give NaN on purpose
]


def problem(shape, dim=-1, layout="contiguous", magnitude=1.0, neg_inf="none"):
    return {"shape": list(shape), "dim": dim, "layout": layout, "magnitude": magnitude, "neg_inf": neg_inf}


def config(**overrides):
    return BACKWARD_SPACE.with_overrides(**overrides)


SINGLE_16 = config(variant="single", BLOCK_SIZE=16, ROWS_PER_PROGRAM=4, num_warps=2, num_stages=1)
SINGLE_512 = config(variant="single", BLOCK_SIZE=512, ROWS_PER_PROGRAM=1, num_warps=4, num_stages=1)
ONLINE_16 = config(variant="online", BLOCK_SIZE=16, ROWS_PER_PROGRAM=2, num_warps=1, num_stages=3)
CONFIGS = {
    "default": dict(BACKWARD_SPACE.default),
    "single_16": SINGLE_16,
    "single_512": SINGLE_512,
    "online_16": ONLINE_16,
}
EDGE = {
    "default": [
        problem([3, 1]),
        problem([2, 5, 7], dim=1, layout="transposed", neg_inf="some"),
        problem([6, 33], dim=0, layout="sliced", magnitude=1e4, neg_inf="row"),
    ],
    "single_16": [problem([5, 13], neg_inf="row"), problem([7, 3, 2], dim=0, layout="sliced", magnitude=1e4)],
    # A single row of 509 (prime) at small magnitude: dx_i is what is left of dy_i - sum, where float32 sums err most.
    "single_512": [problem([509], dim=0, magnitude=1e-3), problem([300, 3], dim=0, layout="transposed")],
    "online_16": [
        problem([3, 50], neg_inf="prefix"),
        problem([5, 17], layout="transposed", magnitude=1e4),
        problem([33, 2, 2], dim=0, layout="sliced"),
    ],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", CONFIGS)
def test_configs_pass_the_float64_gate(name, dtype):
    assert [BACKWARD_SPACE.rejects(CONFIGS[name], p) for p in EDGE[name]] == [None] * len(EDGE[name])
    result = verify(SPEC, CONFIGS[name], dtype, examples=10, max_numel=128, seed=1, extra_problems=EDGE[name])
    assert result.passed, result.failure and result.failure.describe()


@pytest.mark.parametrize("n", [1, 2, 13, 509, 1000, 4093, 65537])
def test_edge_widths_match_float64_in_a_strided_layout(n):
    # Primes, one short of a block, and a row past 64k (the default's online loop runs 65 chunks of it).
    p = problem([3, n] if n < 4096 else [n], dim=-1, layout="sliced" if n < 4096 else "contiguous", magnitude=1e-3)
    assert check_problem(SPEC, dict(BACKWARD_SPACE.default), p, torch.float32) is None
    if n <= 512:
        single = config(variant="single", BLOCK_SIZE=max(16, 1 << (n - 1).bit_length()), num_warps=1, num_stages=1)
        assert check_problem(SPEC, single, p, torch.float16) is None


def test_a_wrong_kernel_fails_the_gate():
    # The gate is not blind: dropping the row sum's subtraction fails it.
    inputs = SPEC.make_inputs(problem([4, 40]), torch.float32, torch.device("cpu"), 0)
    wrong = inputs["y"] * inputs["dy"]
    ours = torch.full_like(wrong, float("nan"))
    SPEC.launch(inputs, dict(BACKWARD_SPACE.default), ours)
    ref = SPEC.reference(inputs)
    assert (ours.double() - ref).abs().max() < 1e-6 < (wrong.double() - ref).abs().max()


def test_autograd_launches_the_tuned_backward_with_the_runtimes_stored_config(user_db):
    stored = config(variant="single", BLOCK_SIZE=64, ROWS_PER_PROGRAM=2, num_warps=2, num_stages=1)
    store_best(user_db, SPEC, "m=8,n=64", stored)
    runtime.clear_cache()
    x = torch.randn(5, 40, requires_grad=True)
    g = torch.randn(5, 40)
    with runtime.record_launches() as launches:
        (dx,) = torch.autograd.grad(softmax(x), x, g)
    assert launches == [("softmax", dict(SPACE.default)), ("softmax_backward", stored)]
    (expected,) = torch.autograd.grad(torch.softmax(x.double(), -1), x, g.double())
    torch.testing.assert_close(dx, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded_grad"])
def test_gradients_match_torch_in_every_layout(dim, layout):
    x = torch.randn(6, 9) * 3
    if layout == "transposed":
        x = torch.randn(9, 6).t()
    x.requires_grad_()
    g = torch.randn(1, 9).expand(6, 9) if layout == "expanded_grad" else torch.randn(6, 9).t().contiguous().t()
    with runtime.record_launches() as launches:
        (ours,) = torch.autograd.grad(softmax(x, dim), x, g)
    assert ("softmax_backward", dict(BACKWARD_SPACE.default)) in launches
    (theirs,) = torch.autograd.grad(torch.softmax(x, dim), x, g)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_gradients_keep_the_dtype_and_match_torch(dtype):
    x = (torch.randn(4, 3, 37) * 2).to(dtype).requires_grad_()
    g = torch.randn(4, 3, 37).to(dtype)
    (ours,) = torch.autograd.grad(softmax(x, 1), x, g)
    (theirs,) = torch.autograd.grad(torch.softmax(x, 1), x, g)
    assert ours.dtype == dtype
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(
        ours, theirs, rtol=2 * ulp, atol=2 * ulp * float(theirs.abs().max())
    )  # two roundings apart


def test_scalars_and_empty_tensors():
    assert backward(torch.tensor(1.0), torch.tensor(2.0), 0) == 0
    with runtime.record_launches() as launches:
        dx = backward(torch.empty(0, 5), torch.empty(0, 5), -1)
    assert dx.shape == (0, 5) and launches == []


def test_gradcheck_and_gradgradcheck():
    # float32 (the public softmax takes fp32, fp16, bf16): finite differences at float32's resolution.
    x = torch.randn(3, 7, requires_grad=True)
    for dim in (0, -1):
        assert torch.autograd.gradcheck(lambda t: softmax(t, dim), (x,), eps=1e-3, atol=2e-3, rtol=2e-2)
        # The second derivative goes through the backward's torch ops (create_graph records a graph).
        assert torch.autograd.gradgradcheck(lambda t: softmax(t, dim), (x,), eps=1e-3, atol=2e-3, rtol=2e-2)


def test_second_derivatives_match_torch_exactly_enough():
    x = torch.randn(4, 11, requires_grad=True)
    g = torch.randn(4, 11)
    v = torch.randn(4, 11)
    grads = []
    for fn in (softmax, lambda t, d: torch.softmax(t, d)):
        (dx,) = torch.autograd.grad(fn(x, -1), x, g, create_graph=True)
        (ddx,) = torch.autograd.grad(dx, x, v)
        grads.append(ddx)
    torch.testing.assert_close(*grads)


def test_space_holds_two_tiles_where_the_forward_holds_one():
    big = problem([4096, 65536])
    single = SPACE.with_overrides(variant="single", BLOCK_SIZE=65536, num_warps=16, num_stages=1)
    assert SPACE.rejects(single, big) is None
    assert "elements per thread" in BACKWARD_SPACE.rejects(single, big)
    assert BACKWARD_SPACE.rejects({**single, "num_warps": 32}, big) is None
    assert BACKWARD_SPACE.rejects(dict(BACKWARD_SPACE.default), problem([1, 200000])) is None
    assert "single needs BLOCK_SIZE" in BACKWARD_SPACE.rejects({**single, "num_warps": 32}, problem([1, 1000]))


def test_registered_with_presets_buckets_and_cost():
    assert autotune.get("softmax_backward") is SPEC and "softmax_backward" in registry.shipped()
    assert [SPEC.bucket(p) for p in SPEC.presets][:2] == ["m=8192,n=4096", "m=16384,n=8192"]
    cost = SPEC.cost(problem([4096, 1024]), torch.bfloat16)
    assert cost.bytes == 3 * 4096 * 1024 * 2  # y and dy read, dx written
    inputs = SPEC.make_inputs(problem([6, 10], dim=0, layout="sliced"), torch.float16, torch.device("cpu"), 0)
    assert inputs["y"].stride() == (20, 2) and inputs["dy"].stride() == (20, 2)
    torch.testing.assert_close(inputs["y"].float().sum(0), torch.ones(10), atol=1e-2, rtol=0)
