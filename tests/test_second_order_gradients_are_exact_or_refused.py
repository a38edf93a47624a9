"""Second-order gradients of every differentiable public kernel are right or refused loudly, never silently
wrong: a gradient-penalty loss (the sum of squared first-order gradients, recorded with create_graph=True,
then differentiated) gives torch's float64 gradients for every input, and gradgradcheck passes; flash_attn,
whose backward is a Triton kernel with no derivative (as torch's flash backend), raises an error naming it.

The kernels take float32, float16 and bfloat16, not float64, so gradgradcheck runs them in float32, with a
finite-difference step and tolerances that float32 affords; the penalty comparisons against float64 are the
tight check. Before the fix, linear's gelu, gelu_tanh and silu and mlp gave wrong penalties (or an aten
error), the norms gave first-order gradients without a graph, and add recorded no graph at all."""

from __future__ import annotations

import functools
import sys

import pytest
import torch
import torch.nn.functional as F

from autotune import runtime
from autotune.kernels import add, flash_attn, group_norm, layer_norm, linear, matmul, mlp, rms_norm, softmax

pytestmark = [pytest.mark.usefixtures("user_db"), pytest.mark.filterwarnings("ignore::RuntimeWarning")]

_matmul_module = sys.modules["autotune.kernels.gemm.matmul"]
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
_TORCH_ACTIVATIONS = {
    "none": lambda t: t,
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
}


def randn(*shape, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=_GEN) * scale


_GEN = torch.Generator().manual_seed(0)


def penalty_gradients(fn, inputs, dtype):
    """d/d inputs of sum(first-order gradients^2), the first-order gradients of a random projection of fn's
    outputs recorded with create_graph=True: what a gradient penalty trains on."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in inputs]
    outputs = fn(*leaves)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    gen = torch.Generator().manual_seed(1)
    loss = sum((o * torch.randn(o.shape, generator=gen).to(dtype)).sum() for o in outputs)
    grads = torch.autograd.grad(loss, leaves, create_graph=True)
    second = torch.autograd.grad(sum(g.square().sum() for g in grads), leaves, allow_unused=True)
    recorded = [g.grad_fn is not None for g in grads]
    return recorded, [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, second)]


def assert_penalty_matches_float64(ours, theirs, inputs):
    """ours (float32 kernels) against theirs (torch in float64), both d/d inputs of the gradient penalty; the
    first-order gradients that carry a graph in torch carry one in ours."""
    recorded, got = penalty_gradients(ours, inputs, torch.float32)
    torch_recorded, want = penalty_gradients(theirs, inputs, torch.float64)
    assert recorded == torch_recorded, "which first-order gradients carry a graph"
    for i, (g, w) in enumerate(zip(got, want)):
        scale = w.abs().max().item() + 1e-3
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4 * scale, msg=lambda m, i=i: f"input {i}: {m}")


def assert_gradgradcheck(fn, inputs):
    """gradcheck and gradgradcheck of fn at float32 inputs: a step of 1e-3 (float32's rounding over it stays
    near 1e-4) and tolerances of 1e-2, far inside the gaps a missing or wrong term makes."""
    leaves = tuple(t.detach().float().requires_grad_() for t in inputs)
    kw = {"eps": 1e-3, "atol": 1e-2, "rtol": 1e-2, "fast_mode": True}
    with pytest.warns(UserWarning, match="not a double precision"):
        assert torch.autograd.gradcheck(fn, leaves, **kw)
    with pytest.warns(UserWarning, match="not a double precision"):
        assert torch.autograd.gradgradcheck(fn, leaves, **kw)


def torch_linear(activation):
    return lambda x, w, b: _TORCH_ACTIVATIONS[activation](F.linear(x, w, b))


def torch_mlp(activation):
    return lambda x, w1, b1, w2, b2: F.linear(_TORCH_ACTIVATIONS[activation](F.linear(x, w1, b1)), w2, b2)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_linear_gradient_penalty_matches_float64(activation):
    inputs = (randn(2, 3, 8), randn(6, 8, scale=0.5), randn(6))
    assert_penalty_matches_float64(lambda x, w, b: linear(x, w, b, activation), torch_linear(activation), inputs)


@pytest.mark.parametrize("activation", ("gelu_tanh", "silu"))
def test_linear_op_gradient_penalty_matches_float64(activation):
    """Through the custom op (what torch.compile traces and mlp's backward records), whose second output, the
    pre-activation, carries the second-order term."""

    def ours(x, w, b):
        return _matmul_module.linear_op(x, w, b, activation, True)[0]

    inputs = (randn(5, 8), randn(6, 8, scale=0.5), randn(6))
    assert_penalty_matches_float64(ours, torch_linear(activation), inputs)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_mlp_gradient_penalty_matches_float64(activation):
    inputs = (randn(5, 8), randn(7, 8, scale=0.5), randn(7), randn(4, 7, scale=0.5), randn(4))
    assert_penalty_matches_float64(lambda *t: mlp(*t, activation=activation), torch_mlp(activation), inputs)


@pytest.mark.parametrize("activation", ("gelu", "silu"))
def test_linear_and_mlp_pass_gradgradcheck(activation):
    assert_gradgradcheck(lambda x, w, b: linear(x, w, b, activation), (randn(3, 4), randn(5, 4), randn(5)))
    assert_gradgradcheck(
        lambda *t: mlp(*t, activation=activation), (randn(3, 4), randn(5, 4), randn(5), randn(2, 5), randn(2))
    )


@pytest.mark.parametrize("contiguous", (True, False), ids=("eager", "op"))
@pytest.mark.parametrize("residual", (False, True), ids=("plain", "residual"))
def test_layer_norm_gradient_penalty_matches_float64(contiguous, residual):
    """Contiguous inputs take the eager autograd.Function, strided ones the custom op: both record."""

    def layout(x):
        return x if contiguous else x.transpose(0, 1).contiguous().transpose(0, 1)

    def ours(x, w, b, *r):
        return layer_norm(layout(x), (8,), w, b, residual=layout(r[0]) if r else None)

    def theirs(x, w, b, *r):
        h = x + r[0] if r else x
        y = F.layer_norm(h, (8,), w, b)
        return (y, h) if r else y

    inputs = (randn(3, 8), randn(8), randn(8)) + ((randn(3, 8),) if residual else ())
    assert_penalty_matches_float64(ours, theirs, inputs)


@pytest.mark.parametrize("residual", (False, True), ids=("plain", "residual"))
def test_rms_norm_gradient_penalty_matches_float64(residual):
    def ours(x, w, *r):
        return rms_norm(x, (8,), w, eps=1e-6, residual=r[0] if r else None)

    def theirs(x, w, *r):
        h = x + r[0] if r else x
        y = F.rms_norm(h, (8,), w, eps=1e-6)
        return (y, h) if r else y

    inputs = (randn(3, 8), randn(8)) + ((randn(3, 8),) if residual else ())
    assert_penalty_matches_float64(ours, theirs, inputs)


@pytest.mark.parametrize("activation", (None, "silu", "mish"))
def test_group_norm_gradient_penalty_matches_float64(activation):
    def theirs(x, w, b):
        y = F.group_norm(x, 2, w, b)
        return {None: y, "silu": F.silu(y), "mish": F.mish(y)}[activation]

    inputs = (randn(2, 4, 3), randn(4), randn(4))
    assert_penalty_matches_float64(lambda x, w, b: group_norm(x, 2, w, b, activation=activation), theirs, inputs)


def test_group_norm_op_gradient_penalty_matches_float64():
    """Through the custom op (what torch.compile traces), which shares the eager Function's backward."""

    def ours(x, w, b):
        return torch.ops.autotune.group_norm_forward(x, w, b, 2, 1e-5, "silu")[0]

    inputs = (randn(2, 4, 3), randn(4), randn(4))
    assert_penalty_matches_float64(ours, lambda x, w, b: F.silu(F.group_norm(x, 2, w, b)), inputs)


def test_norms_pass_gradgradcheck():
    assert_gradgradcheck(lambda x, w, b: layer_norm(x, (4,), w, b), (randn(3, 4), randn(4), randn(4)))
    assert_gradgradcheck(lambda x, w, r: rms_norm(x, (4,), w, residual=r), (randn(3, 4), randn(4), randn(3, 4)))
    assert_gradgradcheck(
        lambda x, w, b: group_norm(x, 2, w, b, activation="silu"), (randn(2, 4, 3), randn(4), randn(4))
    )


def test_add_records_its_graph_and_passes_gradgradcheck():
    x, y = randn(3, 5).requires_grad_(), randn(3, 5)
    out = add(x, y)
    assert out.grad_fn is not None
    g = randn(3, 5)
    out.backward(g)
    torch.testing.assert_close(x.grad, g)
    assert_penalty_matches_float64(lambda x, y: add(x, y).square(), lambda x, y: (x + y).square(), (randn(4), randn(4)))
    assert_gradgradcheck(add, (randn(2, 3), randn(2, 3)))


def test_softmax_and_matmul_pass_gradgradcheck_and_match_float64():
    assert_penalty_matches_float64(lambda x: softmax(x, 0), lambda x: torch.softmax(x, 0), (randn(4, 5),))
    assert_gradgradcheck(lambda x: softmax(x, -1), (randn(3, 4),))
    assert_penalty_matches_float64(matmul, torch.matmul, (randn(2, 3, 4), randn(4, 5)))
    assert_gradgradcheck(matmul, (randn(3, 4), randn(4, 2)))


def test_flash_attn_gives_first_order_gradients_and_refuses_a_second_backward_by_name():
    q, k, v = (randn(1, 2, 5, 4).requires_grad_() for _ in range(3))
    o = flash_attn(q, k, v, is_causal=True)
    dq, dk, dv = torch.autograd.grad(o.square().sum(), (q, k, v), create_graph=True)
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum(), (q, k, v))
    for got, expected in zip((dq, dk, dv), want):
        torch.testing.assert_close(got.detach(), expected)
        assert got.grad_fn is not None  # a graph that refuses, not none that would add nothing
    with pytest.raises(
        NotImplementedError,
        match=r"autotune\.kernels\.flash_attn: second-order gradients are not "
        r"supported.*scaled_dot_product_attention",
    ):
        (dq.square().sum() + dv.sum()).backward()


def test_flash_attn_refuses_through_its_custom_op_too():
    q, k, v = (randn(1, 1, 3, 4).requires_grad_() for _ in range(3))
    o = torch.ops.autotune.flash_attn(q, k, v, False, 0.5)[0]
    (dk,) = torch.autograd.grad(o.sum(), (k,), create_graph=True)
    with pytest.raises(NotImplementedError, match=r"autotune\.kernels\.flash_attn"):
        dk.sum().backward()


def test_a_plain_backward_is_untouched_and_records_nothing():
    """Without create_graph the tuned backward kernel runs as before, giving gradients without a graph; a
    recorded backward runs torch's norm instead."""
    x, w, b = randn(3, 8).requires_grad_(), randn(8).requires_grad_(), randn(8).requires_grad_()
    with runtime.record_launches() as launches:
        grads = torch.autograd.grad(layer_norm(x, (8,), w, b).square().sum(), (x, w, b))
    assert [name for name, _ in launches] == ["layer_norm", "layer_norm_backward"]
    assert all(g.grad_fn is None for g in grads)
    with runtime.record_launches() as launches:
        torch.autograd.grad(layer_norm(x, (8,), w, b).square().sum(), (x, w, b), create_graph=True)
    assert [name for name, _ in launches] == ["layer_norm"]
    want = torch.autograd.grad(F.layer_norm(x, (8,), w, b).square().sum(), (x, w, b))
    for g, expected in zip(grads, want):
        torch.testing.assert_close(g, expected)
