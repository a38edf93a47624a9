"""autotune.nn.GatedMLP runs gated_mlp (the one-GEMM gate and up projections) forward and backward, with Llama's
state_dict keys and outputs and gradients within the gate's budget of float64; under the "measured" policy a call
without autograd runs it only where its stored row shows it at least as fast as torch; an input the kernel does not
take runs torch, its reason counted."""

from __future__ import annotations

import json

import torch

import autotune
from autotune import gpu, runtime
from autotune import nn as ann
from autotune.db import BestRow, ConfigStore
from autotune.gate.compare import compare


class LlamaMLP(torch.nn.Module):
    """transformers' LlamaMLP, written with torch modules; GeGLU (gelu_tanh) where asked."""

    def __init__(self, hidden: int, intermediate: int, bias: bool = False, activation: str = "silu") -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=bias)
        self.act = torch.nn.SiLU() if activation == "silu" else torch.nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


def step(module: torch.nn.Module, x: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor]:
    x = x.clone().requires_grad_()
    out = module(x)
    (out * weight.to(out.dtype)).sum().backward()
    return [out.detach(), x.grad, *(p.grad for p in module.parameters())]


def test_the_module_loads_as_llamas_mlp_and_runs_the_gated_kernel_forward_and_backward(user_db):
    torch.manual_seed(0)  # its weights: the global generator's state otherwise depends on the tests run before
    ours = ann.GatedMLP(16, 24, bias=True, activation="gelu_tanh")
    theirs, reference = LlamaMLP(16, 24, True, "gelu_tanh"), LlamaMLP(16, 24, True, "gelu_tanh").double()
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    theirs.load_state_dict(ours.state_dict())
    ours.load_state_dict(theirs.state_dict())
    reference.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))
    weight = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    with runtime.record_launches() as launches:
        got = step(ours, x, weight)
    assert [name for name, _ in launches] == ["gated_mlp", "linear", "matmul", "matmul", "gated_mlp_backward"] + [
        "matmul"
    ] * 3
    for i, (o, r, b) in enumerate(zip(got, step(reference, x.double(), weight), step(theirs, x, weight))):
        _, _, reason = compare(o, r, b, torch.float32)
        assert reason is None, f"output and gradients, {i}: {reason}"


def store(db_path, time_ms: float, baseline_time_ms: float) -> None:
    spec = autotune.get("gated_mlp")
    with ConfigStore(str(db_path)) as s:
        s.record_best(
            BestRow(
                kernel="gated_mlp",
                source_hash=spec.source_hash,
                gpu=gpu.current_gpu().name,
                device_name="test",
                dtype="fp32",
                bucket="m=8,k=16,h=32,n=16",
                config_json=json.dumps(spec.space.default),
                problem_json="{}",
                time_ms=time_ms,
                baseline_time_ms=baseline_time_ms,
                examples_verified=1,
                triton_version="x",
                torch_version="y",
            )
        )
    runtime.clear_cache()
    ann.clear()


def test_the_measured_policy_runs_it_where_its_row_is_at_least_as_fast_as_torch(user_db):
    ours, x = ann.GatedMLP(16, 24, policy="measured"), torch.randn(7, 16)
    theirs = LlamaMLP(16, 24)
    theirs.load_state_dict(ours.state_dict())
    for time_ms, launched in ((2.0, []), (1.0, ["gated_mlp", "linear"])):
        store(user_db, time_ms, 1.5)
        with runtime.record_launches() as launches, torch.no_grad():
            torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)
        assert [name for name, _ in launches] == launched
    assert "kernels 1 ms <= torch 1.5 ms" in ann.decisions()[-1].why


def test_an_input_the_kernel_does_not_take_runs_torch_and_says_why():
    ann.clear()
    ours, x = ann.GatedMLP(8, 12).double(), torch.randn(3, 8, dtype=torch.float64)
    theirs = LlamaMLP(8, 12).double()
    theirs.load_state_dict(ours.state_dict())
    with runtime.record_launches() as launches:
        torch.testing.assert_close(ours(x), theirs(x))
    assert launches == []
    assert ann.fallbacks()[("gated_mlp", "dtype float64 is not one the kernel takes")] == 1
