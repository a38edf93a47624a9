"""gated_mlp's backward: gradients of x and every parameter match float64 torch (about as closely as torch's
own, in float32 and float16), from the pre-activations the forward's epilogue saved (the forward GEMM runs once),
through the tuned elementwise kernel (gated_mlp_backward) for dg and du and the tuned matmul for the products, only
those needed; the eager path skips the custom op's dispatch and gets its gradients; second order is torch's exact
one (a gradient penalty matches float64, gradgradcheck passes); fake tensors and torch.compile(fullgraph=True) go
through the ops."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from dispatched_ops import DispatchedOps, autotune_ops
from torch._subclasses.fake_tensor import FakeTensorMode

from autotune import runtime
from autotune.kernels import gated_mlp
from autotune.kernels.gemm import gated_mlp as _gated_mlp
from autotune.kernels.gemm.gated_mlp import _gated_mlp_op

pytestmark = [pytest.mark.usefixtures("user_db"), pytest.mark.filterwarnings("ignore::RuntimeWarning")]

FULL_STEP = ["gated_mlp", "linear", "matmul", "matmul", "gated_mlp_backward", "matmul", "matmul", "matmul"]
"""What a call whose inputs all need gradients launches, forward and backward."""
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu", None)
TORCH_ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
    None: lambda t: t,
}


def torch_gated(activation):
    def forward(x, wg, wu, wd, bg, bu, bd):
        return F.linear(TORCH_ACTIVATIONS[activation](F.linear(x, wg, bg)) * F.linear(x, wu, bu), wd, bd)

    return forward


def ours(activation):
    def forward(x, wg, wu, wd, bg, bu, bd):
        return gated_mlp(x, wg, wu, wd, activation, b_gate=bg, b_up=bu, b_down=bd)

    return forward


def tensors(seed: int, m=(2, 3), k=20, h=36, n=12):
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen) * scale

    return [
        randn(*m, k),
        randn(h, k, scale=0.25),
        randn(h, k, scale=0.25),
        randn(n, h, scale=0.2),
        randn(h),
        randn(h),
        randn(n),
    ], randn(*m, n)


def grads(fn, inputs, grad, dtype=None):
    leaves = [t.detach().to(dtype or t.dtype).clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gradients_match_float64_as_closely_as_torchs(activation):
    inputs, g = tensors(0)
    out, got = grads(ours(activation), inputs, g)
    ref_out, want = grads(torch_gated(activation), inputs, g, torch.float64)
    base_out, base = grads(torch_gated(activation), inputs, g)
    for what, o, r, b in [("output", out, ref_out, base_out), *zip(range(7), got, want, base)]:
        # within a few times torch's own float32 error, plus a floor at the tensor's scale (sums that cancel)
        error, torch_error = (o.double() - r).abs().max(), (b.double() - r).abs().max()
        assert error <= 4 * torch_error + 1e-6 * r.abs().max(), f"{what}: {error} against torch's {torch_error}"


def test_half_gradients_are_as_close_to_float64_as_torchs():
    inputs, g = tensors(1, m=(16,), k=40, h=24, n=8)
    _, exact = grads(torch_gated("silu"), inputs, g, torch.float64)
    _, got = grads(ours("silu"), inputs, g, torch.float16)
    _, theirs = grads(torch_gated("silu"), inputs, g, torch.float16)
    for o, t, e in zip(got, theirs, exact):
        assert o.dtype == torch.float16 and (o.double() - e).abs().max() <= 2 * (t.double() - e).abs().max() + 1e-3


def test_the_backward_reads_the_saved_pre_activations_and_runs_only_the_products_needed(monkeypatch):
    elementwise = []
    backward = _gated_mlp.gates_backward
    monkeypatch.setattr(_gated_mlp, "gates_backward", lambda *a: elementwise.append(a[2]) or backward(*a))
    inputs, g = tensors(2)
    with runtime.record_launches() as launches:
        grads(ours("gelu_tanh"), inputs, g)
    # The gated GEMM once (nothing recomputed), the down projection, then dw_down, dh, the elementwise step, dx (two),
    # [dw_gate; dw_up].
    assert [name for name, _ in launches] == FULL_STEP
    assert elementwise == ["gelu_tanh"]
    x, *params = (t.detach() for t in inputs)
    with runtime.record_launches() as launches:
        gated_mlp(x.requires_grad_(), *params[:3]).sum().backward()  # no parameter needs a gradient
    assert [name for name, _ in launches] == ["gated_mlp", "linear", "matmul", "gated_mlp_backward", "matmul", "matmul"]
    with torch.no_grad():
        assert gated_mlp(x, *params[:3]).grad_fn is None


def test_an_eager_call_skips_the_ops_dispatch_and_gets_the_ops_gradients():
    inputs, g = tensors(3, m=(7,))
    with DispatchedOps() as calls:
        _, eager = grads(ours("silu"), inputs, g)
    assert autotune_ops(calls.names) == []

    _, op = grads(through_op("silu"), inputs, g)
    for e, o in zip(eager, op):
        assert torch.equal(e, o)


def penalty_gradients(fn, inputs, dtype):
    """d/d inputs of the sum of squared first-order gradients (recorded with create_graph=True)."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in inputs]
    out = fn(*leaves)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    first = torch.autograd.grad((out * weight).sum(), leaves, create_graph=True)
    second = torch.autograd.grad(sum(g.square().sum() for g in first), leaves, allow_unused=True)
    recorded = [g.grad_fn is not None for g in first]
    return recorded, [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, second)]


def through_op(activation):
    """The custom op (what torch.compile traces and tensor subclasses reach)."""

    def forward(x, wg, wu, wd, bg, bu, bd):
        return _gated_mlp_op(x, wg, bg, wu, bu, wd, bd, "none" if activation is None else activation, True)[0]

    return forward


@pytest.mark.parametrize("path", (ours, through_op), ids=("eager", "op"))
@pytest.mark.parametrize("activation", ("silu", "gelu_tanh"))
def test_a_gradient_penalty_matches_float64(activation, path):
    inputs, _ = tensors(4, m=(5,), k=8, h=7, n=4)
    recorded, got = penalty_gradients(path(activation), inputs, torch.float32)
    torch_recorded, want = penalty_gradients(torch_gated(activation), inputs, torch.float64)
    assert recorded == torch_recorded == [True] * 6 + [False]  # the down bias's gradient is dy summed: no graph
    for i, (g, w) in enumerate(zip(got, want)):
        scale = w.abs().max().item() + 1e-3
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4 * scale, msg=lambda m, i=i: f"input {i}: {m}")


def test_gradcheck_and_gradgradcheck_pass():
    inputs, _ = tensors(5, m=(3,), k=4, h=5, n=2)
    leaves = tuple(t.float().requires_grad_() for t in inputs)
    kw = {"eps": 1e-3, "atol": 1e-2, "rtol": 1e-2, "fast_mode": True}
    with pytest.warns(UserWarning, match="not a double precision"):
        assert torch.autograd.gradcheck(ours("silu"), leaves, **kw)
    with pytest.warns(UserWarning, match="not a double precision"):
        assert torch.autograd.gradgradcheck(ours("silu"), leaves, **kw)


def test_fake_tensors_go_through_the_op():
    with FakeTensorMode():
        x, wg, wu, wd = (torch.empty(*s, requires_grad=True) for s in ((7, 16), (24, 16), (24, 16), (5, 24)))
        y = gated_mlp(x, wg, wu, wd)
        dx, dwg, dwu, dwd = torch.autograd.grad(y, (x, wg, wu, wd), torch.empty(7, 5))
        assert y.shape == (7, 5) and dx.shape == x.shape and dwg.shape == wg.shape and dwd.shape == wd.shape


@pytest.mark.usefixtures("no_autograd_cache")
def test_torch_compile_fullgraph_matches_eager_torch_forward_and_backward():
    inputs, g = tensors(6)
    with runtime.record_launches() as launches:
        out, got = grads(torch.compile(ours("silu"), fullgraph=True), inputs, g)
    expect, want = grads(torch_gated("silu"), inputs, g)
    for o, w in zip([out, *got], [expect, *want]):
        torch.testing.assert_close(o, w, atol=1e-4, rtol=1e-4)
    assert sorted(name for name, _ in launches) == sorted(FULL_STEP)  # the compiled backward may reorder them
