"""A patched module routes each call signature once: the checks and the stored rows' evidence run on the first
call of a signature (the module's settings; its tensors' shapes, strides, dtypes, devices and requires_grad; grad
mode; autocast), and a repeated call reuses the answer. A change in any of them is a new signature, decided anew;
the report lists each call shape once. Rows written with ConfigStore into a temporary user database."""

from __future__ import annotations

import json

import torch

import autotune
from autotune import gpu, runtime
from autotune.db import BestRow, ConfigStore
from autotune.nn import evidence, norms, routing

BUCKET = "m=4,n=32,res=0"  # layer_norm of (4, 32)


def store(db_path, kernel: str, bucket: str, time_ms: float, baseline_time_ms: float) -> None:
    spec = autotune.get(kernel)
    with ConfigStore(str(db_path)) as s:
        s.record_best(
            BestRow(
                kernel=kernel,
                source_hash=spec.source_hash,
                gpu=gpu.current_gpu().name,
                device_name="test",
                dtype="fp32",
                bucket=bucket,
                config_json=json.dumps(spec.space.default),
                problem_json=json.dumps({}),
                time_ms=time_ms,
                baseline_time_ms=baseline_time_ms,
                examples_verified=1,
                triton_version="x",
                torch_version="y",
            )
        )
    runtime.clear_cache()


def counting(monkeypatch, module, name: str) -> list:
    """Calls of module.<name> from now on (their arguments), the function still doing its work."""
    calls, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args: calls.append(args) or real(*args))
    return calls


def launched(model, x, calls: int = 1) -> list[str]:
    with runtime.record_launches() as launches:
        for _ in range(calls):
            model(x)
    return [kernel for kernel, _ in launches]


def test_a_repeated_call_is_decided_once(user_db, monkeypatch):
    store(user_db, "layer_norm", BUCKET, 1.0, 2.0)
    model = torch.nn.LayerNorm(32)
    autotune.patch(model)
    decided = counting(monkeypatch, norms, "routed")
    judged = counting(monkeypatch, evidence, "judge")
    x = torch.randn(4, 32)
    with torch.no_grad():
        assert launched(model, x, calls=20) == ["layer_norm"] * 20
        assert (len(decided), len(judged)) == (1, 1)
        assert launched(model, torch.randn(2, 32), calls=5) == []  # another shape: no row for its bucket
        assert (len(decided), len(judged)) == (2, 2)
        assert launched(model, x, calls=5) == ["layer_norm"] * 5  # both signatures remembered
        assert len(decided) == 2
    assert len(launched(model, x.requires_grad_(), calls=3)) == 0  # with autograd: no backward row, so torch
    assert len(decided) == 3
    assert [(d.call, d.routed) for d in routing.decisions()] == [
        ("m=4, n=32, grad=False", True),
        ("m=2, n=32, grad=False", False),
        ("m=4, n=32, grad=True", False),
    ]
    autotune.unpatch(model)


def test_a_call_the_kernel_does_not_take_is_checked_once_and_counted_each_time(user_db, monkeypatch):
    model = torch.nn.Sequential(torch.nn.LayerNorm(32)).double()
    autotune.patch(model, force=True)
    checked = counting(monkeypatch, norms, "_norm_reason")
    with torch.no_grad():
        assert launched(model, torch.randn(4, 32, dtype=torch.float64), calls=4) == []
    assert len(checked) == 1
    assert routing.fallbacks() == {("layer_norm", "dtype float64 is not one the kernel takes"): 4}
    autotune.unpatch(model)


def test_the_parameters_are_part_of_the_signature(user_db):
    # With autograd recording, the backward's row counts too: here it is slower than torch, so a call whose
    # weight requires grad stays on torch, and the same call with the weight frozen runs the kernel.
    store(user_db, "layer_norm", BUCKET, 1.0, 2.0)
    store(user_db, "layer_norm_backward", BUCKET, 5.0, 3.0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(32))
    autotune.patch(model)
    x = torch.randn(4, 32)
    assert launched(model, x) == []
    model.requires_grad_(False)
    assert launched(model, x) == ["layer_norm"]
    model.requires_grad_(True)
    assert launched(model, x) == []
    with torch.no_grad():  # grad mode: the same tensors, another signature
        assert launched(model, x) == ["layer_norm"]
    autotune.unpatch(model)


def test_an_input_in_another_memory_layout_is_its_own_signature(user_db):
    # GroupNorm's channels-last layout is a bucket of its own: the same shape in another layout is decided anew.
    model = torch.nn.Sequential(torch.nn.GroupNorm(2, 8))
    autotune.patch(model, force=True)
    x = torch.randn(2, 8, 4, 4)
    channels_last = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        assert launched(model, x) == ["group_norm"]
        assert launched(model, channels_last) == ["group_norm"]
    keys = [key for key in routing.CALLS if key[0][0] == "group_norm"]
    assert len(keys) == 2
    autotune.unpatch(model)
