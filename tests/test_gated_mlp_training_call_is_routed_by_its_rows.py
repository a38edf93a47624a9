"""A gated MLP call that autograd records is judged by the rows of everything it launches: the forward (gated_mlp,
its down projection included), the backward's elementwise step (gated_mlp_backward) and each matmul product of the
backward, in the buckets the backward really looks up. Under the "measured" policy, `autotune.nn.GatedMLP` and a
patched transformers LlamaMLP run gated_mlp forward and backward where those rows, summed, are at least as fast as
torch's, and stay on torch where they are slower or missing. Rows written with ConfigStore into a temporary user
database."""

from __future__ import annotations

import planted_rows
import pytest
import torch
from test_patch_transformers_and_diffusers_models import _require

import autotune
from autotune import nn as ann
from autotune import runtime
from autotune.nn import uses
from autotune.runtime.lookup import TunedConfigs

M, K, H, N = 7, 16, 24, 16
"""x (7, 16) through gate and up projections of 24 features, down to 16."""
FORWARD = ("gated_mlp", "m=8,k=16,h=32,n=16")
BACKWARD = ("gated_mlp_backward", "m=8,h=32")
PRODUCTS = {
    "dw_down": ("matmul", "m=16,n=32,k=8,b=1"),  # dy^T (16, 7) @ h (7, 24)
    "dh": ("matmul", "m=8,n=32,k=16,b=1"),  # dy (7, 16) @ w_down (16, 24)
    "dx": ("matmul", "m=8,n=16,k=32,b=1"),  # dg (7, 24) @ w_gate (24, 16), and du @ w_up
    "dw_gate_up": ("matmul", "m=64,n=16,k=8,b=1"),  # [dg | du]^T (48, 7) @ x (7, 16)
}


def buckets(launches: list[tuple[str, dict]]) -> list[tuple[str, str]]:
    found = []
    for kernel, problem in launches:
        spec = autotune.get(kernel)
        found.append((kernel, spec.bucket(spec.problem_for(problem, torch.float32))))
    return found


@pytest.mark.parametrize(
    "needs",
    [
        ("x", "w_gate", "w_up", "w_down"),
        ("x",),
        ("w_gate",),
        ("w_down",),
        ("b_gate",),
    ],
)
def test_the_uses_of_a_recorded_call_are_what_its_backward_looks_up(needs, user_db, monkeypatch):
    looked_up = []
    lookup = TunedConfigs.lookup

    def spy(self, dtype, key, bucket, problem):
        looked_up.append((self.spec.name, bucket()))
        return lookup(self, dtype, key, bucket, problem)

    monkeypatch.setattr(TunedConfigs, "lookup", spy)
    gen = torch.Generator().manual_seed(0)
    shapes = {"x": (M, K), "w_gate": (H, K), "w_up": (H, K), "w_down": (N, H), "b_gate": (H,)}
    tensors = {name: torch.randn(*shape, generator=gen).requires_grad_(name in needs) for name, shape in shapes.items()}
    y = autotune.kernels.gated_mlp(
        tensors["x"], tensors["w_gate"], tensors["w_up"], tensors["w_down"], b_gate=tensors["b_gate"]
    )
    y.sum().backward()
    flags = [name in needs for name in ("x", "w_gate", "w_up", "w_down")] + ["b_gate" in needs]
    # The down projection's linear lookup is the forward's (gated_mlp's row times the whole forward); a product
    # launched twice (dx's two) is looked up once, its plan kept.
    expected = list(dict.fromkeys(buckets(uses.gated_mlp(M, K, H, N, *flags))))
    assert [found for found in looked_up if found[0] != "linear"] == expected


def test_the_uses_of_a_training_call_list_the_backward_kernels():
    names = buckets(uses.gated_mlp(M, K, H, N, True, True, True, True, False))
    dw_down, dh, dx, dw_gate_up = PRODUCTS.values()
    assert names == [FORWARD, dw_down, dh, BACKWARD, dx, dx, dw_gate_up]
    assert buckets(uses.gated_mlp(M, K, H, N)) == [FORWARD]


def store(db_path, kernel: str, bucket: str, time_ms: float, baseline_time_ms: float) -> None:
    planted_rows.store(db_path, kernel, bucket, time_ms, baseline_time_ms)
    ann.clear()


def store_all(db_path, backward_ms: float) -> None:
    """The forward 1 ms against torch's 1.5, each product as fast as torch's (1 ms), the elementwise step
    backward_ms against torch's 1: kernels 6 + backward_ms ms, torch 7.5 ms."""
    store(db_path, *FORWARD, 1.0, 1.5)
    for product in PRODUCTS.values():
        store(db_path, *product, 1.0, 1.0)
    store(db_path, *BACKWARD, backward_ms, 1.0)


def gated_why() -> str:
    """Why the last gated_mlp call was routed as it was (the fallback's linear calls make decisions of their own)."""
    return [d for d in ann.decisions() if d.kind == "gated_mlp"][-1].why


def training_step(module: torch.nn.Module, x: torch.Tensor) -> tuple[list[str], list[torch.Tensor]]:
    x = x.clone().requires_grad_()
    with runtime.record_launches() as launches:
        module(x).square().sum().backward()
    grads = [x.grad, *(p.grad.clone() for p in module.parameters())]
    module.zero_grad()
    return [kernel for kernel, _ in launches], grads


def test_the_measured_policy_routes_a_training_call_only_where_its_rows_beat_torch(user_db):
    ours = ann.GatedMLP(K, H, policy="measured")
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(1))

    store_all(user_db, backward_ms=2.0)  # 8 ms > 7.5 ms
    launched, _ = training_step(ours, x)
    assert launched == []  # torch's three linear calls (no linear rows) and its product
    assert "kernels 8 ms > torch 7.5 ms" in gated_why()

    store_all(user_db, backward_ms=0.5)  # 6.5 ms <= 7.5 ms
    launched, got = training_step(ours, x)
    assert launched == ["gated_mlp", "linear", "matmul", "matmul", "gated_mlp_backward", "matmul", "matmul", "matmul"]
    assert "kernels 6.5 ms <= torch 7.5 ms" in gated_why()
    for g, t in zip(got, torch_step(ours, x)):
        torch.testing.assert_close(g, t, atol=1e-5, rtol=1e-5)


def torch_step(module: ann.GatedMLP, x: torch.Tensor) -> list[torch.Tensor]:
    """The same step in torch's ops, on the module's parameters."""
    x = x.clone().requires_grad_()
    g, u, d = module.gate_proj, module.up_proj, module.down_proj
    out = d(torch.nn.functional.silu(g(x)) * u(x))
    out.square().sum().backward()
    grads = [x.grad, *(p.grad.clone() for p in module.parameters())]
    module.zero_grad()
    return grads


def test_a_missing_backward_row_keeps_a_training_call_on_torch_but_not_a_forward_one(user_db):
    store(user_db, *FORWARD, 1.0, 1.5)
    for product in PRODUCTS.values():
        store(user_db, *product, 1.0, 1.0)
    ours, x = ann.GatedMLP(K, H, policy="measured"), torch.randn(M, K)
    launched, _ = training_step(ours, x)
    assert launched == []
    assert "gated_mlp_backward fp32 m=8,h=32: no stored row for this bucket" in gated_why()
    with runtime.record_launches() as launches, torch.no_grad():
        ours(x)
    assert [kernel for kernel, _ in launches] == ["gated_mlp", "linear"]


def test_a_patched_llama_mlp_trains_through_gated_mlp_where_the_rows_beat_torch(user_db):
    transformers = _require("transformers")
    from transformers.models.llama.modeling_llama import LlamaMLP

    config = transformers.LlamaConfig(hidden_size=K, intermediate_size=H, num_attention_heads=2, hidden_act="silu")
    model = torch.nn.Sequential(LlamaMLP(config))
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(2))
    store_all(user_db, backward_ms=2.0)
    autotune.patch(model)
    try:
        assert training_step(model, x)[0] == []
        store_all(user_db, backward_ms=0.5)
        launched, _ = training_step(model, x)
    finally:
        autotune.unpatch(model)
    assert "gated_mlp" in launched and "gated_mlp_backward" in launched
