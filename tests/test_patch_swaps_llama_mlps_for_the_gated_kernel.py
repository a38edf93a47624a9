"""autotune.patch on a transformers Llama: each LlamaMLP (down(act(gate(x)) * up(x))) runs the tuned gated_mlp where
it takes the call; outputs and gradients stay within the gate's budget of the float64 model; an activation gated_mlp
does not compute is left on torch, with the reason; unpatch restores the class."""

from __future__ import annotations

import copy

import pytest
import torch
from test_patch_transformers_and_diffusers_models import _loss_and_grads, _require, _within_budget, tiny_llama

import autotune
from autotune import runtime


def test_llama_mlps_run_gated_mlp_forward_and_backward():
    model = tiny_llama()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    base, base_grads = _loss_and_grads(model, ids)
    ref, ref_grads = _loss_and_grads(copy.deepcopy(model).double(), ids)
    mlps = [m for m in model.modules() if type(m).__name__ == "LlamaMLP"]
    classes = {type(m) for m in mlps}

    report = autotune.patch(model, force=True)
    now = {change.path: change.now for change in report.replaced}
    assert now["model.layers.0.mlp"] == now["model.layers.1.mlp"] == "gated_mlp"
    assert not any(change.path.startswith("model.layers.0.mlp.") for change in report.changes)
    with runtime.record_launches() as launches:
        out, grads = _loss_and_grads(model, ids)
    launched = [kernel for kernel, _ in launches]
    assert launched.count("gated_mlp") == 2
    _within_budget(out, ref, base)
    for g, r, b in zip(grads, ref_grads, base_grads):
        _within_budget(g, r, b)
    gate = model.model.layers[0].mlp.gate_proj.weight
    assert gate.grad is not None and torch.isfinite(gate.grad).all()

    autotune.unpatch(model)
    assert {type(m) for m in mlps} == classes
    with runtime.record_launches() as launches:
        torch.testing.assert_close(_loss_and_grads(model, ids)[0], base, rtol=0, atol=0)
    assert launches == []


@pytest.mark.parametrize("hidden_act, runs", [("gelu_pytorch_tanh", "gated_mlp"), ("relu2", "torch")])
def test_the_models_activation_decides(hidden_act, runs):
    transformers = _require("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_act=hidden_act,
        attn_implementation="sdpa",
    )
    model = transformers.LlamaForCausalLM(config)
    report = autotune.patch(model, force=True)
    change = next(c for c in report.changes if c.path == "model.layers.0.mlp")
    assert change.now == runs
    if runs == "torch":
        assert repr(hidden_act) in change.note
    autotune.unpatch(model)


def test_the_measured_policy_leaves_an_mlp_without_rows_on_torch():
    model = tiny_llama()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    autotune.patch(model)  # measured: no stored gated_mlp row for these shapes shows it as fast as torch
    with torch.no_grad(), runtime.record_launches() as launches:
        model(ids)
    assert "gated_mlp" not in [kernel for kernel, _ in launches]
    autotune.unpatch(model)
