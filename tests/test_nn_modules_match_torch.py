"""autotune.nn's modules against their torch counterparts: the same state_dict (loaded both ways), outputs and
gradients within the gate's budget of a float64 reference (the torch module in float64), the tuned kernels
launched forward and backward; and torch's path, with its reason counted, where a kernel does not take a call."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from autotune import nn as ann
from autotune import runtime
from autotune.gate.compare import compare


class TorchGatedMLP(torch.nn.Module):
    """transformers' LlamaMLP, written with torch modules."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Activated(torch.nn.Module):
    """A torch module followed by an activation, with the module's own state_dict keys."""

    def __init__(self, module: torch.nn.Module, activation) -> None:
        super().__init__()
        self.module, self.activation = module, activation

    def forward(self, x):
        return self.activation(self.module(x))

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state, strict=True):
        return self.module.load_state_dict(state, strict)


class Attention(torch.nn.Module):
    def __init__(self, fn, **options) -> None:
        super().__init__()
        self.fn, self.options = fn, options

    def forward(self, q, k, v):
        return self.fn(q, k, v, **self.options)


def _run(module: torch.nn.Module, inputs: list[torch.Tensor], weight: torch.Tensor | None = None):
    """The output, and the gradients of sum(output * weight) in each input and parameter."""
    inputs = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = module(*inputs)
    weight = torch.randn_like(out) if weight is None else weight.to(out.dtype)
    (out * weight).sum().backward()
    return out.detach(), [x.grad for x in inputs] + [p.grad for p in module.parameters()], weight


def _matches_torch(ours: torch.nn.Module, theirs: torch.nn.Module, inputs: list[torch.Tensor], kernels: set[str]):
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    with torch.no_grad():
        for p in ours.parameters():  # not the constructor's ones and zeros: every parameter matters
            p.copy_(torch.randn_like(p) * 0.5 + 1)
    theirs.load_state_dict(ours.state_dict())
    ours.load_state_dict(theirs.state_dict())
    reference = copy.deepcopy(theirs).double()
    with runtime.record_launches() as launches:
        out, grads, weight = _run(ours, inputs)
    assert kernels <= {kernel for kernel, _ in launches}, launches
    base, base_grads, _ = _run(theirs, inputs, weight)
    ref, ref_grads, _ = _run(reference, [x.double() for x in inputs], weight)
    checks = [("output", out, ref, base), *zip(range(len(grads)), grads, ref_grads, base_grads)]
    for what, o, r, b in checks:
        _, _, reason = compare(o, r, b, torch.float32)
        assert reason is None, f"{what}: {reason}"


def _x(*shape):
    torch.manual_seed(0)
    return torch.randn(*shape) * 2 + 0.5


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm(bias):
    _matches_torch(
        ann.LayerNorm(24, bias=bias),
        torch.nn.LayerNorm(24, bias=bias),
        [_x(3, 5, 24)],
        {"layer_norm", "layer_norm_backward"},
    )


def test_rms_norm():
    _matches_torch(
        ann.RMSNorm([4, 6], eps=1e-6),
        torch.nn.RMSNorm([4, 6], eps=1e-6),
        [_x(5, 4, 6)],
        {"rms_norm", "rms_norm_backward"},
    )


@pytest.mark.parametrize("activation,channels_last", [(None, False), ("silu", True), ("mish", False)])
def test_group_norm(activation, channels_last):
    x = _x(2, 16, 3, 5)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    after = {None: lambda y: y, "silu": F.silu, "mish": F.mish}[activation]
    _matches_torch(
        ann.GroupNorm(4, 16, activation=activation),
        Activated(torch.nn.GroupNorm(4, 16), after),
        [x],
        {"group_norm", "group_norm_backward"},
    )


@pytest.mark.parametrize("activation", [None, "gelu_tanh", "silu"])
def test_linear(activation):
    after = {None: lambda y: y, "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"), "silu": F.silu}[activation]
    _matches_torch(
        ann.Linear(16, 24, activation=activation),
        Activated(torch.nn.Linear(16, 24), after),
        [_x(3, 7, 16)],
        {"linear", "matmul"},
    )


def test_mlp_loads_as_a_sequential_of_linear_activation_linear():
    theirs = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 8))
    _matches_torch(ann.MLP(16, 32, 8, activation="silu"), theirs, [_x(9, 16)], {"mlp", "linear", "matmul"})


def test_gated_mlp_loads_as_llamas_mlp():
    _matches_torch(ann.GatedMLP(16, 24), TorchGatedMLP(16, 24), [_x(2, 5, 16)], {"linear", "matmul"})


@pytest.mark.parametrize("causal", [True, False])
def test_attention_helper_has_sdpas_semantics(causal):
    q, k, v = _x(1, 4, 6, 8), _x(1, 2, 9, 8) * 0.5, _x(1, 2, 9, 8)
    options = {"is_causal": causal, "enable_gqa": True, "scale": 0.3}
    ours = Attention(ann.scaled_dot_product_attention, **options)
    _matches_torch(
        ours, Attention(F.scaled_dot_product_attention, **options), [q, k, v], {"flash_attn", "flash_attn_backward"}
    )


def test_route_sdpa_sends_sdpa_calls_to_flash_attn():
    q = _x(1, 2, 5, 8)
    with runtime.record_launches() as launches, ann.route_sdpa():
        out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert [kernel for kernel, _ in launches] == ["flash_attn"]
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, q, q, is_causal=True))


def test_calls_the_kernels_do_not_take_run_torch_and_say_why():
    ann.clear()
    norm, x = ann.LayerNorm(8).double(), _x(3, 8).double()
    q = _x(1, 2, 4, 8)
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    with runtime.record_launches() as launches:
        torch.testing.assert_close(norm(x), F.layer_norm(x, (8,), norm.weight, norm.bias))
        out = ann.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    assert launches == []
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, q, q, attn_mask=mask))
    reasons = ann.fallbacks()
    assert reasons[("layer_norm", "dtype float64 is not one the kernel takes")] == 1
    assert reasons[("flash_attn", "an attn_mask (flash_attn takes is_causal only)")] == 1


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="policy"):
        ann.LayerNorm(8, policy="sometimes")
    with pytest.raises(ValueError, match="activation"):
        ann.GroupNorm(2, 8, activation="tanh")
    with pytest.raises(ValueError, match="activation"):
        ann.Linear(8, 8, activation="mish")
