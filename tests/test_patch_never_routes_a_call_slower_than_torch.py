"""A patched model's calls run the tuned kernels only where this GPU's stored rows for the call's dtype and buckets
show the kernels at least as fast as the torch work they replace (time_ms summed <= torch's baseline_time_ms), the
backward's rows too when autograd records; anywhere else torch runs them. Rows written with ConfigStore into a
temporary user database."""

from __future__ import annotations

import torch
from planted_rows import store

import autotune
from autotune import device_limits, gpu, runtime
from autotune.nn import evidence
from autotune.runtime import fallback

BUCKET = "m=4,n=32,res=0"  # layer_norm of (4, 32)


def run(model, x, *, grad: bool = False) -> set[str]:
    """The kernels one forward (and backward, with grad) launched."""
    report = autotune.patch(model)
    try:
        with runtime.record_launches() as launches, torch.set_grad_enabled(grad):
            out = model(x.requires_grad_(grad))
            if grad:
                out.sum().backward()
        run.calls = report.calls()
    finally:
        autotune.unpatch(model)
    return {kernel for kernel, _ in launches}


def test_a_row_faster_than_torch_routes_the_call(user_db):
    store(user_db, "layer_norm", BUCKET, 1.0, 2.0)
    assert run(torch.nn.LayerNorm(32), torch.randn(4, 32)) == {"layer_norm"}
    assert "kernels 1 ms <= torch 2 ms" in run.calls


def test_a_row_as_fast_as_torch_routes_the_call(user_db):
    store(user_db, "layer_norm", BUCKET, 2.0, 2.0)
    assert run(torch.nn.LayerNorm(32), torch.randn(4, 32)) == {"layer_norm"}


def test_a_row_slower_than_torch_leaves_the_call_on_torch(user_db):
    store(user_db, "layer_norm", BUCKET, 2.0, 1.0)
    model, x = torch.nn.LayerNorm(32), torch.randn(4, 32)
    assert run(model, x) == set()
    assert "kernels 2 ms > torch 1 ms" in run.calls


def test_a_row_without_torch_time_or_of_another_bucket_is_no_evidence(user_db):
    store(user_db, "layer_norm", BUCKET, 1.0, None)
    store(user_db, "layer_norm", "m=8,n=32,res=0", 1.0, 2.0)  # the nearest bucket: timed on another shape
    model = torch.nn.LayerNorm(32)
    assert run(model, torch.randn(4, 32)) == set()
    assert "no torch time" in run.calls
    assert run(model, torch.randn(2, 32)) == set()
    assert "no stored row for this bucket" in run.calls
    assert run(model, torch.randn(8, 32)) == {"layer_norm"}


def test_another_gpus_row_serves_the_kernel_but_is_no_evidence_here(user_db, monkeypatch):
    problem = {**autotune.get("layer_norm").presets[0], "shape": [4, 32], "residual": False}
    store(user_db, "layer_norm", BUCKET, 1.0, 2.0, gpu_name="H100", problem=problem)  # faster than torch, on the H100
    h20 = gpu.GPUInfo("H20", "NVIDIA H20", (9, 0), device_limits.MODELS["H20"].sms, None, None, {})  # no rows shipped
    monkeypatch.setattr(gpu, "current_gpu", lambda: h20)
    monkeypatch.setattr(fallback, "_warned", set())
    runtime.clear_cache()
    assert run(torch.nn.LayerNorm(32), torch.randn(4, 32)) == set()  # the H100's row serves it, but is no evidence
    assert "no stored row for this bucket on H20 (another GPU's serves it)" in run.calls


def test_with_autograd_the_call_counts_the_backward_row_too(user_db):
    # layer_norm_backward's torch time is torch's forward and backward (its spec's baseline recomputes the
    # forward): the call's torch time is that alone, the kernels' time both rows' sum.
    store(user_db, "layer_norm", BUCKET, 1.0, 2.0)
    store(user_db, "layer_norm_backward", BUCKET, 3.0, 3.5)
    model, x = torch.nn.LayerNorm(32), torch.randn(4, 32)
    assert run(model, x, grad=True) == set()
    assert "kernels 4 ms > torch 3.5 ms" in run.calls
    store(user_db, "layer_norm_backward", BUCKET, 2.5, 3.5)  # replaces the row: it is faster
    assert run(model, x, grad=True) == {"layer_norm", "layer_norm_backward"}
    assert run(model, x, grad=False) == {"layer_norm"}


def test_a_call_counts_its_kernels_together(user_db):
    # The forward alone is slower than torch's; forward and backward together are faster than torch's.
    store(user_db, "layer_norm", BUCKET, 1.0, 0.8)
    store(user_db, "layer_norm_backward", BUCKET, 0.5, 2.0)
    model, x = torch.nn.LayerNorm(32), torch.randn(4, 32)
    assert run(model, x, grad=False) == set()
    assert run(model, x, grad=True) == {"layer_norm", "layer_norm_backward"}


def test_a_fused_linear_needs_the_linear_row_and_under_autograd_both_products(user_db):
    store(user_db, "linear", "m=8,n=32,k=16,b=1", 1.0, 2.0)
    model, x = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU()), torch.randn(8, 16)
    assert run(model, x) == {"linear"}
    assert run(model, x, grad=True) == set()  # no matmul rows for dx (8x32 @ 32x16) and dW (32x8 @ 8x16)
    assert "matmul fp32 m=8,n=16,k=32,b=1: no stored row for this bucket" in run.calls
    store(user_db, "matmul", "m=8,n=16,k=32,b=1", 1.0, 1.0)
    store(user_db, "matmul", "m=32,n=16,k=8,b=1", 1.0, 0.5)  # slower alone, but 3 ms <= 3.5 ms in all
    assert run(model, x, grad=True) == {"linear", "matmul"}


def test_attention_alone_has_no_evidence_against_sdpa_but_with_its_backward_it_has(user_db):
    # flash_attn's stored torch time also computes the log-sum-exp; flash_attn_backward's is sdpa's forward and
    # backward, the whole torch work a recorded call replaces.
    bucket = "bh=2,g=1,nq=8,nk=8,d=8,causal=1"
    store(user_db, "flash_attn", bucket, 1.0, 5.0)
    store(user_db, "flash_attn_backward", bucket, 2.0, 3.5)
    model = SelfAttention()
    assert run(model, torch.randn(1, 8, 16)) == set()
    assert "no evidence against sdpa alone" in run.calls
    assert run(model, torch.randn(1, 8, 16), grad=True) == {"flash_attn", "flash_attn_backward"}
    assert "kernels 3 ms <= torch 3.5 ms" in run.calls


class SelfAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.qkv(x).view(1, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_the_decision_is_made_once_per_call_shape(user_db, monkeypatch):
    store(user_db, "layer_norm", BUCKET, 1.0, 2.0)
    reads = []
    read_rows = runtime.read_rows
    monkeypatch.setattr(evidence.runtime, "read_rows", lambda *a, **k: reads.append(a) or read_rows(*a, **k))
    model = torch.nn.LayerNorm(32)
    autotune.patch(model)
    with runtime.record_launches() as launches, torch.no_grad():
        for _ in range(5):
            model(torch.randn(4, 32))
    autotune.unpatch(model)
    assert [kernel for kernel, _ in launches] == ["layer_norm"] * 5
    assert len(reads) == 1
    assert len(autotune.nn.decisions()) == 1
