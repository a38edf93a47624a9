"""torch.compile of a patched model breaks its graph no more often than of the unpatched one: a U-Net-style block
and a Llama-style decoder layer built from torch modules (and transformers' decoder layer, where installed), whose
unpatched versions compile to one graph, compile patched to one graph too (torch._dynamo.explain), under the
default policy (nothing routed on this CPU: decided while tracing) and forced (the kernels in the graph); and
fullgraph=True compiles them, computing what the unpatched model computes."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import autotune


class Attention(torch.nn.Module):
    def __init__(self, width: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.q = torch.nn.Linear(width, width, bias=False)
        self.kv = torch.nn.Linear(width, 2 * kv_heads * self.head_dim, bias=False)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x):
        b, n, width = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.out(o.transpose(1, 2).reshape(b, n, width))


class UNetBlock(torch.nn.Module):
    """A ResNet block (GroupNorm + SiLU in nn.Sequential) then attention over the positions with LayerNorms and
    a Linear + GELU feed-forward."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.res = torch.nn.Sequential(
            torch.nn.GroupNorm(2, channels), torch.nn.SiLU(), torch.nn.Conv2d(channels, channels, 3, padding=1)
        )
        self.norm1, self.norm2 = torch.nn.LayerNorm(channels), torch.nn.LayerNorm(channels)
        self.attn = Attention(channels, 2, 2)
        self.ff = torch.nn.Sequential(torch.nn.Linear(channels, 16), torch.nn.GELU(), torch.nn.Linear(16, channels))

    def forward(self, x):
        x = x + self.res(x)
        b, c, h, w = x.shape
        t = x.flatten(2).transpose(1, 2)
        t = t + self.attn(self.norm1(t))
        t = t + self.ff(self.norm2(t))
        return t.transpose(1, 2).reshape(b, c, h, w)


class DecoderLayer(torch.nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.norm1, self.norm2 = torch.nn.RMSNorm(width), torch.nn.RMSNorm(width)
        self.attn = Attention(width, 4, 2)
        self.up, self.down = torch.nn.Linear(width, 32, bias=False), torch.nn.Linear(32, width, bias=False)

    def forward(self, x):
        h = x + self.attn(self.norm1(x))
        return h + self.down(F.silu(self.up(self.norm2(h))))


def llama_layer():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8,
        attn_implementation="sdpa",
    )
    layer, rotary = LlamaDecoderLayer(config, layer_idx=0), LlamaRotaryEmbedding(config)

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x):
            position_embeddings = rotary(x, torch.arange(x.shape[1])[None])
            out = self.layer(x, position_embeddings=position_embeddings)
            return out[0] if isinstance(out, tuple) else out

    return Layer()


MODELS = {
    "unet block": (UNetBlock, (2, 8, 4, 4), False),
    "decoder layer": (DecoderLayer, (1, 8, 16), True),
    "transformers decoder layer": (llama_layer, (1, 8, 16), True),
}


def breaks(model, x, grad: bool) -> tuple[int, int]:
    torch._dynamo.reset()
    with torch.set_grad_enabled(grad):
        found = torch._dynamo.explain(model)(x)
    return found.graph_count, found.graph_break_count


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("force", [False, True])
def test_patched_model_compiles_to_as_few_graphs(name, force, user_db, no_autograd_cache):
    build, shape, grad = MODELS[name]
    if name.startswith("transformers") and importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    torch.manual_seed(0)
    model, x = build(), torch.randn(*shape)
    patched = copy.deepcopy(model)
    report = autotune.patch(patched, force=force)
    assert "flash_attn" in {c.now for c in report.replaced}
    try:
        assert breaks(model, x, grad) == (1, 0)
        assert breaks(patched, x, grad) == (1, 0)
        torch._dynamo.reset()
        compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    finally:
        torch._dynamo.reset()
        autotune.unpatch(patched)
