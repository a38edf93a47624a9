"""autotune.patch on a model built from torch modules: what it swaps, fuses, routes and leaves (and why), the
patched model's outputs and gradients within the gate's budget, the kernels really launched, and unpatch
restoring every module; also under torch.compile(fullgraph=True)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import autotune
from autotune import runtime
from autotune.gate.compare import compare


class SelfAttention(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x):
        b, n, width = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(o.transpose(1, 2).reshape(b, n, width))


class OwnNorm(torch.nn.LayerNorm):
    def forward(self, x):
        return super().forward(x) * 2


def make_model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    shared = torch.nn.GroupNorm(2, 8)
    hooked = torch.nn.GroupNorm(2, 8)
    hooked.register_forward_hook(lambda module, args, out: None)
    return torch.nn.Sequential(
        SelfAttention(16, 2),  # 0: sdpa routed, its LayerNorm swapped
        torch.nn.RMSNorm(16),  # 1
        torch.nn.Linear(16, 32),
        torch.nn.GELU(approximate="tanh"),
        torch.nn.Linear(32, 16),  # 2+3 fused
        torch.nn.Unflatten(2, (4, 4)),  # 5: (B, N, 16) -> (B, C=N, 4, 4)
        torch.nn.GroupNorm(2, 8),
        torch.nn.SiLU(),  # 6+7 fused
        shared,
        torch.nn.Mish(),
        shared,  # 8: used twice, so not fused with 9
        hooked,
        torch.nn.SiLU(),  # 11: has a hook, so not fused with 12
        torch.nn.Flatten(2),
        OwnNorm(16),  # 14: a subclass with its own forward: left
    )


def _x():
    torch.manual_seed(1)
    return torch.randn(2, 8, 16)


def _output_and_grads(model, x):
    x = x.detach().clone().requires_grad_(True)
    out = model(x)
    torch.manual_seed(2)
    (out * torch.randn_like(out)).sum().backward()
    return out.detach(), [x.grad] + [p.grad for p in model.parameters()]


def test_patch_swaps_fuses_routes_and_leaves_with_reasons():
    model = make_model()
    report = autotune.patch(model, force=True)
    now = {(change.path, change.was): change.now for change in report.changes}
    assert now[("0", "SelfAttention")] == "flash_attn" and now[("0.norm", "LayerNorm")] == "layer_norm"
    assert now[("1", "RMSNorm")] == "rms_norm" and now[("2", "Linear + GELU")] == "linear+gelu_tanh"
    assert now[("6", "GroupNorm + SiLU")] == "group_norm+silu"
    # Not fused, yet each GroupNorm alone still runs the kernel (its hooks kept: the module is the same object).
    assert now[("8", "GroupNorm + Mish")] == now[("11", "GroupNorm + SiLU")] == now[("14", "OwnNorm")] == "torch"
    assert now[("8", "GroupNorm")] == now[("11", "GroupNorm")] == "group_norm"
    notes = {change.path: change.note for change in report.left}
    assert "more than one place" in notes["8"] and "hooks" in notes["11"] and "subclass" in notes["14"]
    assert isinstance(model[3], torch.nn.Identity) and isinstance(model[7], torch.nn.Identity)
    assert isinstance(model[9], torch.nn.Mish) and isinstance(model[12], torch.nn.SiLU)
    assert type(model[8]) is autotune.nn.GroupNorm and model[8].activation is None  # swapped, unfused
    text = str(report)
    assert "linear+gelu_tanh" in text and "more than one place" in text and "'always'" in text


def test_patched_model_matches_torch_and_runs_the_kernels():
    model, x = make_model(), _x()
    reference = copy.deepcopy(model).double()
    base, base_grads = _output_and_grads(model, x)
    ref, ref_grads = _output_and_grads(reference, x.double())
    autotune.patch(model, force=True)
    for p in model.parameters():
        p.grad = None
    with runtime.record_launches() as launches:
        out, grads = _output_and_grads(model, x)
    assert {
        "flash_attn",
        "flash_attn_backward",
        "layer_norm",
        "layer_norm_backward",
        "rms_norm",
        "rms_norm_backward",
        "linear",
        "matmul",
        "group_norm",
        "group_norm_backward",
    } <= {kernel for kernel, _ in launches}
    for what, o, r, b in [("output", out, ref, base), *zip(range(len(grads)), grads, ref_grads, base_grads)]:
        _, _, reason = compare(o, r, b, torch.float32)
        assert reason is None, f"{what}: {reason}"


def test_unpatch_restores_every_module_and_the_state_dict_never_changes():
    model, x = make_model(), _x()
    before = model(x)
    modules = list(model.modules())
    classes = [type(m) for m in modules]
    keys = list(model.state_dict())
    params = list(model.parameters())
    autotune.patch(model, force=True)
    assert list(model.state_dict()) == keys and list(model.parameters()) == params  # an optimizer's params still
    with pytest.raises(ValueError, match="already patched"):
        autotune.patch(model)
    copied = copy.deepcopy(model)
    with pytest.raises(ValueError, match="copy of a patched model"):
        autotune.unpatch(copied)
    autotune.unpatch(model)
    assert list(model.modules()) == modules and [type(m) for m in modules] == classes
    assert not any(hasattr(m, "policy") for m in modules)
    with runtime.record_launches() as launches:
        torch.testing.assert_close(model(x), before, rtol=0, atol=0)
    assert launches == []
    with pytest.raises(ValueError, match="not patched"):
        autotune.unpatch(model)


def test_measured_policy_without_rows_leaves_every_call_on_torch():
    model, x = make_model(), _x()
    before = model(x)
    report = autotune.patch(model)  # no row for the CPU interpreter in the shipped database
    with runtime.record_launches() as launches:
        out = model(x)
    assert launches == []
    torch.testing.assert_close(out, before, rtol=0, atol=0)
    calls = report.calls()
    assert "no stored row for this bucket" in calls and "kernels" not in calls.split("evidence")[1]
    autotune.unpatch(model)


def test_patched_model_compiles_fullgraph(no_autograd_cache):
    model, x = make_model(), _x()
    del model[8:]  # the hooked GroupNorm would break the graph whether patched or not
    base, base_grads = _output_and_grads(model, x)
    autotune.patch(model, force=True)
    for p in model.parameters():
        p.grad = None
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with runtime.record_launches() as launches:
        out, grads = _output_and_grads(compiled, x)
    assert {"flash_attn", "flash_attn_backward", "rms_norm", "linear", "group_norm"} <= {k for k, _ in launches}
    torch.testing.assert_close(out, base, rtol=1e-4, atol=1e-5)
    for g, b in zip(grads, base_grads):
        torch.testing.assert_close(g, b, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()
