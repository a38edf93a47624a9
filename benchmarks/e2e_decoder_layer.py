"""End-to-end: one Llama-style decoder layer's training step (forward + backward), in one process, as

- eager: the layer as built (torch's modules, sdpa);
- compile: torch.compile of it;
- liger: Liger-Kernel's RMSNorm, SwiGLU MLP and RoPE in it (where liger_kernel is installed);
- autotune: `autotune.patch(layer)`, the default policy (kernels only where this GPU's stored rows show them at
  least as fast as torch); autotune-forced: `patch(layer, force=True)`; autotune-compile: torch.compile of the
  patched layer (default policy);

with a per-op breakdown of each (torch.profiler). Defaults are the issue's shape: hidden 4096, 32 heads, 8 KV heads,
SwiGLU (intermediate 14336), RoPE, sequence 4096, batch 1, bf16. The layer is transformers' LlamaDecoderLayer where
transformers is installed (--impl transformers), else the same math from torch modules (--impl torch).

    python benchmarks/e2e_decoder_layer.py --out benchmarks/results/e2e-decoder-layer-H100
    python benchmarks/e2e_decoder_layer.py --smoke --out /tmp/e2e-smoke     # tiny, on the CPU: a check, not timing
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import types

import e2e_common as common
import torch
import torch.nn.functional as F

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune import gpu
from autotune.measure import environment
from autotune.spec import dtype_from_name

VARIANTS = ["eager", "compile", "liger", "autotune", "autotune-forced", "autotune-compile"]
GOALS = [("autotune", "eager", 1.05), ("autotune", "liger", 1.0), ("autotune-compile", "compile", 1.0)]
"""The issue's goals for the training step: patched >= 1.05x eager and >= 1.0x Liger; compile of the patched layer
at least as fast as compile of the unpatched one."""


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(q, k, cos, sin):
    """transformers' apply_rotary_pos_emb: cos and sin (B, N, D), q and k (B, H, N, D)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rope_tables(batch: int, seq: int, head_dim: int, device, dtype, theta: float = 500000.0):
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    freqs = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    emb = torch.cat((freqs, freqs), dim=-1)[None].expand(batch, seq, head_dim)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class Attention(torch.nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = torch.nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = torch.nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = torch.nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = torch.nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.rope = apply_rope

    def forward(self, x, cos, sin):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rope(q, k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.o_proj(o.transpose(1, 2).reshape(b, n, -1))


class GatedMLP(torch.nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(torch.nn.Module):
    """transformers' LlamaDecoderLayer from torch modules (pre-norm, GQA attention with RoPE, SwiGLU MLP)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, intermediate: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.input_layernorm = torch.nn.RMSNorm(hidden, eps=eps)
        self.self_attn = Attention(hidden, heads, kv_heads)
        self.post_attention_layernorm = torch.nn.RMSNorm(hidden, eps=eps)
        self.mlp = GatedMLP(hidden, intermediate)

    def forward(self, x, position_embeddings):
        h = x + self.self_attn(self.input_layernorm(x), *position_embeddings)
        return h + self.mlp(self.post_attention_layernorm(h))


def build(args, device, dtype):
    """(layer, its forward's keyword arguments but the input, a Liger version or the reason there is none)."""
    if args.impl == "transformers":
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        config = LlamaConfig(
            hidden_size=args.hidden,
            intermediate_size=args.intermediate,
            num_attention_heads=args.heads,
            num_key_value_heads=args.kv_heads,
            max_position_embeddings=max(args.seq, 8),
            rms_norm_eps=1e-5,
            attn_implementation="sdpa",
        )
        layer = LlamaDecoderLayer(config, layer_idx=0).to(device=device, dtype=dtype)
        rotary = LlamaRotaryEmbedding(config).to(device)
        x = torch.zeros(args.batch, args.seq, args.hidden, device=device, dtype=dtype)
        cos, sin = rotary(x, torch.arange(args.seq, device=device)[None].expand(args.batch, -1))
    else:
        config = types.SimpleNamespace(hidden_size=args.hidden, intermediate_size=args.intermediate, hidden_act="silu")
        layer = DecoderLayer(args.hidden, args.heads, args.kv_heads, args.intermediate).to(device=device, dtype=dtype)
        cos, sin = rope_tables(args.batch, args.seq, args.hidden // args.heads, device, dtype)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            p.copy_(torch.ones_like(p) if "norm" in name else torch.randn_like(p) * p.shape[-1] ** -0.5)
    return layer, {"position_embeddings": (cos, sin)}, liger_version(layer, config, args.impl)


def liger_version(layer, config, impl):
    """The layer with Liger-Kernel's RMSNorm, SwiGLU MLP and RoPE (the modules apply_liger_kernel_to_llama puts in
    a model), or the reason there is none."""
    if importlib.util.find_spec("liger_kernel") is None:
        return "liger_kernel is not installed"
    try:
        from liger_kernel.transformers import LigerRMSNorm, LigerSwiGLUMLP, liger_rotary_pos_emb
    except Exception as exc:
        return f"liger_kernel does not import: {type(exc).__name__}: {exc}"
    liger = copy.deepcopy(layer)
    for name in ("input_layernorm", "post_attention_layernorm"):
        old = getattr(liger, name)
        eps = getattr(old, "variance_epsilon", None) or getattr(old, "eps", None) or 1e-5
        new = LigerRMSNorm(old.weight.shape[0], eps=eps).to(old.weight)
        new.load_state_dict(old.state_dict())
        setattr(liger, name, new)
    mlp = LigerSwiGLUMLP(config).to(liger.mlp.gate_proj.weight)
    mlp.load_state_dict(liger.mlp.state_dict())
    liger.mlp = mlp
    if impl == "transformers":
        from transformers.models.llama import modeling_llama

        liger.rope_swap = (modeling_llama, liger_rotary_pos_emb)  # module-global in transformers: swapped per step
    else:
        liger.self_attn.rope = liger_rotary_pos_emb
    return liger


def _rope_swapped(layer):
    """Liger's RoPE in place of transformers' module-global apply_rotary_pos_emb while the layer runs."""
    swap = getattr(layer, "rope_swap", None)

    class Swapped:
        def __enter__(self):
            if swap is not None:
                module, rope = swap
                self.original, module.apply_rotary_pos_emb = module.apply_rotary_pos_emb, rope

        def __exit__(self, *exc):
            if swap is not None:
                swap[0].apply_rotary_pos_emb = self.original

    return Swapped()


def forward(layer, x, kwargs):
    """The layer's output on x, without autograd."""

    def run():
        with torch.no_grad(), _rope_swapped(layer):
            out = layer(x, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    return run


def training_step(layer, x, kwargs, dy):
    """One forward + backward; gradients set to None first, as an optimizer's zero_grad does."""
    params = list(layer.parameters())

    def step():
        for p in params:
            p.grad = None
        x.grad = None
        with _rope_swapped(layer):
            out = layer(x, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(dy)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.common_arguments(parser)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--intermediate", type=int, default=14336)
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--impl", choices=("auto", "transformers", "torch"), default="auto")
    args = parser.parse_args()
    if args.smoke:
        args.batch, args.seq, args.hidden, args.heads, args.kv_heads, args.intermediate = 1, 8, 32, 2, 1, 48
        args.dtype, args.compile_backend, args.profile_steps = "fp32", args.compile_backend or "eager", 1
    if args.impl == "auto":
        args.impl = "transformers" if importlib.util.find_spec("transformers") else "torch"
    device, dtype = gpu.device(), dtype_from_name(args.dtype)

    layer, kwargs, liger = build(args, device, dtype)
    torch.manual_seed(1)
    x = torch.randn(args.batch, args.seq, args.hidden, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    notes, layers = [], {"eager": layer, "compile": common.compiled(copy.deepcopy(layer), args.compile_backend)}
    if isinstance(liger, str):
        notes.append(f"liger: not measured ({liger})")
    else:
        layers["liger"] = liger
    patched = copy.deepcopy(layer)
    patch_report = autotune.patch(patched)
    forced = copy.deepcopy(layer)
    autotune.patch(forced, force=True)
    layers.update(
        {
            "autotune": patched,
            "autotune-forced": forced,
            "autotune-compile": common.compiled(patched, args.compile_backend),
        }
    )
    names = [n for n in common.selected(VARIANTS, args.variants) if n in layers]
    steps = {name: training_step(layers[name], x, kwargs, dy) for name in names}

    kernels = {name: common.launched(steps[name]) for name in names if name.startswith("autotune")}
    differences = common.differences({name: forward(layers[name], x, kwargs) for name in names}, "eager")
    times = common.time_variants(steps, args.graphs, args.rounds)
    breakdowns = {name: common.breakdown(steps[name], args.profile_steps) for name in names} if args.breakdown else {}
    waits = {name: common.waits(steps[name], args.profile_steps) for name in names} if args.breakdown else {}
    goals = common.goals_table(times, GOALS, kernels)
    env = environment.environment()
    setup = [
        (
            f"Llama decoder layer ({args.impl}) training step, batch {args.batch}, seq {args.seq}, hidden "
            f"{args.hidden}, {args.heads} heads / {args.kv_heads} KV, SwiGLU {args.intermediate}, {args.dtype}"
        ),
        f"{args.rounds} timing rounds",
    ]
    text = common.markdown(
        "End-to-end: Llama-style decoder layer, forward + backward",
        env,
        setup,
        times,
        "eager",
        goals,
        kernels,
        differences,
        str(patch_report),
        patch_report.calls(),
        breakdowns,
        notes,
        waits,
    )
    common.save(
        args.out,
        common.data(env, args, times, goals, kernels, differences, patch_report, breakdowns, notes, waits),
        text,
    )


if __name__ == "__main__":
    main()
