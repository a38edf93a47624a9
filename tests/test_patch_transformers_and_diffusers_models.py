"""autotune.patch on a tiny randomly initialised transformers LlamaForCausalLM and a diffusers UNet2DModel (built
from config objects: nothing downloaded): outputs (and the Llama's gradients) within the gate's budget of the
unpatched model, the report listing what was swapped, the kernels really launched, unpatch restoring the model.
The packages are the `models` extra: without them these tests skip, except in CI, which installs it."""

from __future__ import annotations

import copy
import importlib
import os

import pytest
import torch

import autotune
from autotune import runtime
from autotune.gate.compare import compare


def _require(package: str):
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI installs the models extra: {exc}")
        pytest.skip(f"{package} is not installed (pip install -e '.[models]')")


def _within_budget(out, ref, base):
    _, _, reason = compare(out, ref, base, torch.float32)
    assert reason is None, reason


def tiny_llama():
    transformers = _require("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(ids).logits
    logits.float().logsumexp(-1).sum().backward()
    return logits.detach(), [model.model.norm.weight.grad, model.model.embed_tokens.weight.grad]


def test_llama_rms_norms_and_attention():
    model = tiny_llama()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    base, base_grads = _loss_and_grads(model, ids)
    ref, ref_grads = _loss_and_grads(copy.deepcopy(model).double(), ids)
    norms = [m for m in model.modules() if type(m).__name__ == "LlamaRMSNorm"]
    classes = {type(m) for m in norms}

    report = autotune.patch(model, force=True)
    now = {change.path: change.now for change in report.replaced}
    assert now[""] == "flash_attn" and model.config._attn_implementation == "autotune_always"
    for path in ("model.norm", "model.layers.0.input_layernorm", "model.layers.1.post_attention_layernorm"):
        assert now[path] == "rms_norm"
    with runtime.record_launches() as launches:
        out, grads = _loss_and_grads(model, ids)
    launched = [kernel for kernel, _ in launches]
    assert launched.count("rms_norm") == 5 and launched.count("flash_attn") == 2
    assert {"rms_norm_backward", "flash_attn_backward"} <= set(launched)
    _within_budget(out, ref, base)
    for g, r, b in zip(grads, ref_grads, base_grads):
        _within_budget(g, r, b)

    autotune.unpatch(model)
    assert model.config._attn_implementation == "sdpa" and {type(m) for m in norms} == classes
    with runtime.record_launches() as launches:
        torch.testing.assert_close(_loss_and_grads(model, ids)[0], base, rtol=0, atol=0)
    assert launches == []


def test_llama_norms_of_other_math_are_left():
    _require("transformers")
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    model = tiny_llama()
    model.model.norm = GemmaRMSNorm(32)  # (1 + weight): not rms_norm's math
    report = autotune.patch(model)
    left = {change.path: change.note for change in report.left}
    assert "not LlamaRMSNorm's" in left["model.norm"] and type(model.model.norm) is GemmaRMSNorm
    assert model.config._attn_implementation == "autotune"  # the measured policy's name
    autotune.unpatch(model)


def test_unet_resnet_group_norm_silu_and_attention():
    diffusers = _require("diffusers")
    torch.manual_seed(0)
    model = diffusers.UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(16, 32),
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=8,
    ).eval()
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        base = model(x, 3).sample
        ref = copy.deepcopy(model).double()(x.double(), 3).sample
    modules = list(model.modules())
    classes = [type(m) for m in modules]

    report = autotune.patch(model, force=True)
    fused = [c.path for c in report.replaced if c.now == "group_norm+silu"]
    assert "mid_block.resnets.0.norm1" in fused and "up_blocks.0.resnets.1.norm2" in fused and len(fused) == 16
    assert [c.now for c in report.replaced if c.was == "Attention"] == ["flash_attn"] * 4
    with runtime.record_launches() as launches, torch.no_grad():
        out = model(x, 3).sample
    launched = [kernel for kernel, _ in launches]
    assert launched.count("group_norm") == 21 and launched.count("flash_attn") == 4
    _within_budget(out, ref, base)

    autotune.unpatch(model)
    assert list(model.modules()) == modules and [type(m) for m in modules] == classes
    with torch.no_grad():
        torch.testing.assert_close(model(x, 3).sample, base, rtol=0, atol=0)
