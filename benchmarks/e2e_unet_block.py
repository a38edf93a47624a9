"""End-to-end: one Stable-Diffusion-style U-Net block's forward (a ResNet block, then a spatial transformer with
self- and cross-attention), in one process, as

- eager: the block as built; compile: torch.compile of it;
- autotune: `autotune.patch(block)`, the default policy (kernels only where this GPU's stored rows show them at
  least as fast as torch); autotune-forced: `patch(block, force=True)`; autotune-compile: torch.compile of the
  patched block (default policy);

with a per-op breakdown of each (torch.profiler). Defaults are SD 1.5's first down block at 512x512 images:
64x64 latents, 320 channels, batch 2 (classifier-free guidance), 8 heads of 40, 32 groups, a 77-token text context of
768, fp16, under torch.no_grad. The block is diffusers' ResnetBlock2D + Transformer2DModel where diffusers is
installed (--impl diffusers), else the same math from torch modules as the original Stable Diffusion code writes it
(nn.Sequential of GroupNorm, SiLU, conv: --impl torch).

    python benchmarks/e2e_unet_block.py --out benchmarks/results/e2e-unet-block-H100
    python benchmarks/e2e_unet_block.py --smoke --out /tmp/e2e-smoke     # tiny, on the CPU: a check, not timing
"""

from __future__ import annotations

import argparse
import copy
import importlib.util

import e2e_common as common
import torch
import torch.nn.functional as F

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune import gpu
from autotune.measure import environment
from autotune.spec import dtype_from_name

VARIANTS = ["eager", "compile", "autotune", "autotune-forced", "autotune-compile"]
GOALS = [("autotune", "eager", 1.1), ("autotune-compile", "compile", 1.0)]
"""The issue's goals: the patched block >= 1.1x eager; compile of it at least as fast as compile of the unpatched."""


class ResBlock(torch.nn.Module):
    """Stable Diffusion's ResBlock (ldm/modules/diffusionmodules/openaimodel.py), same channels in and out."""

    def __init__(self, channels: int, temb: int, groups: int) -> None:
        super().__init__()
        self.in_layers = torch.nn.Sequential(
            torch.nn.GroupNorm(groups, channels), torch.nn.SiLU(), torch.nn.Conv2d(channels, channels, 3, padding=1)
        )
        self.emb_layers = torch.nn.Sequential(torch.nn.SiLU(), torch.nn.Linear(temb, channels))
        self.out_layers = torch.nn.Sequential(
            torch.nn.GroupNorm(groups, channels),
            torch.nn.SiLU(),
            torch.nn.Dropout(0.0),
            torch.nn.Conv2d(channels, channels, 3, padding=1),
        )

    def forward(self, x, temb):
        h = self.in_layers(x) + self.emb_layers(temb)[:, :, None, None]
        return x + self.out_layers(h)


class CrossAttention(torch.nn.Module):
    def __init__(self, dim: int, context_dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.to_q = torch.nn.Linear(dim, heads * head_dim, bias=False)
        self.to_k = torch.nn.Linear(context_dim, heads * head_dim, bias=False)
        self.to_v = torch.nn.Linear(context_dim, heads * head_dim, bias=False)
        self.to_out = torch.nn.Linear(heads * head_dim, dim)

    def forward(self, x, context=None):
        context = x if context is None else context
        b = x.shape[0]
        q, k, v = (
            t.view(b, -1, self.heads, self.head_dim).transpose(1, 2)
            for t in (self.to_q(x), self.to_k(context), self.to_v(context))
        )
        o = F.scaled_dot_product_attention(q, k, v)
        return self.to_out(o.transpose(1, 2).reshape(b, -1, self.heads * self.head_dim))


class GEGLU(torch.nn.Module):
    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(dim, inner * 2)

    def forward(self, x):
        h, gate = self.proj(x).chunk(2, dim=-1)
        return h * F.gelu(gate)


class SpatialTransformer(torch.nn.Module):
    """Stable Diffusion's SpatialTransformer with one BasicTransformerBlock (conv projections, as SD 1.5)."""

    def __init__(self, channels: int, heads: int, head_dim: int, context_dim: int, groups: int) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(groups, channels, eps=1e-6)
        self.proj_in = torch.nn.Conv2d(channels, channels, 1)
        self.norm1, self.norm2, self.norm3 = (torch.nn.LayerNorm(channels) for _ in range(3))
        self.attn1 = CrossAttention(channels, channels, heads, head_dim)
        self.attn2 = CrossAttention(channels, context_dim, heads, head_dim)
        self.ff = torch.nn.Sequential(
            GEGLU(channels, 4 * channels), torch.nn.Dropout(0.0), torch.nn.Linear(4 * channels, channels)
        )
        self.proj_out = torch.nn.Conv2d(channels, channels, 1)

    def forward(self, x, context):
        b, c, h, w = x.shape
        t = self.proj_in(self.norm(x)).flatten(2).transpose(1, 2)
        t = t + self.attn1(self.norm1(t))
        t = t + self.attn2(self.norm2(t), context)
        t = t + self.ff(self.norm3(t))
        return x + self.proj_out(t.transpose(1, 2).reshape(b, c, h, w))


class TorchBlock(torch.nn.Module):
    def __init__(self, channels, temb, heads, head_dim, context_dim, groups) -> None:
        super().__init__()
        self.resnet = ResBlock(channels, temb, groups)
        self.attention = SpatialTransformer(channels, heads, head_dim, context_dim, groups)

    def forward(self, x, temb, context):
        return self.attention(self.resnet(x, temb), context)


class DiffusersBlock(torch.nn.Module):
    """diffusers' CrossAttnDownBlock2D body without its downsampler: ResnetBlock2D, then Transformer2DModel."""

    def __init__(self, channels, temb, heads, head_dim, context_dim, groups) -> None:
        super().__init__()
        from diffusers.models.resnet import ResnetBlock2D
        from diffusers.models.transformers.transformer_2d import Transformer2DModel

        self.resnet = ResnetBlock2D(
            in_channels=channels, out_channels=channels, temb_channels=temb, groups=groups, eps=1e-5
        )
        self.attention = Transformer2DModel(
            num_attention_heads=heads,
            attention_head_dim=head_dim,
            in_channels=channels,
            cross_attention_dim=context_dim,
            norm_num_groups=groups,
        )

    def forward(self, x, temb, context):
        return self.attention(self.resnet(x, temb), encoder_hidden_states=context).sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.common_arguments(parser)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--latent", type=int, default=64, help="latent height and width")
    parser.add_argument("--channels", type=int, default=320)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--temb", type=int, default=1280)
    parser.add_argument("--context", type=int, default=77, help="text tokens")
    parser.add_argument("--context-dim", type=int, default=768)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--impl", choices=("auto", "diffusers", "torch"), default="auto")
    args = parser.parse_args()
    if args.smoke:
        args.batch, args.latent, args.channels, args.heads, args.groups = 1, 4, 16, 2, 4
        args.temb, args.context, args.context_dim = 32, 5, 24
        args.dtype, args.compile_backend, args.profile_steps = "fp32", args.compile_backend or "eager", 1
    if args.impl == "auto":
        args.impl = "diffusers" if importlib.util.find_spec("diffusers") else "torch"
    device, dtype = gpu.device(), dtype_from_name(args.dtype)

    torch.manual_seed(0)
    cls = DiffusersBlock if args.impl == "diffusers" else TorchBlock
    block = cls(args.channels, args.temb, args.heads, args.channels // args.heads, args.context_dim, args.groups)
    block = block.to(device=device, dtype=dtype).eval()
    x = torch.randn(args.batch, args.channels, args.latent, args.latent, device=device, dtype=dtype)
    temb = torch.randn(args.batch, args.temb, device=device, dtype=dtype)
    context = torch.randn(args.batch, args.context, args.context_dim, device=device, dtype=dtype)

    blocks = {"eager": block, "compile": common.compiled(copy.deepcopy(block), args.compile_backend)}
    patched = copy.deepcopy(block)
    patch_report = autotune.patch(patched)
    forced = copy.deepcopy(block)
    autotune.patch(forced, force=True)
    blocks.update(
        {
            "autotune": patched,
            "autotune-forced": forced,
            "autotune-compile": common.compiled(patched, args.compile_backend),
        }
    )
    names = common.selected(VARIANTS, args.variants)

    def forward(module):
        def step():
            with torch.no_grad():
                return module(x, temb, context)

        return step

    steps = {name: forward(blocks[name]) for name in names}
    kernels = {name: common.launched(steps[name]) for name in names if name.startswith("autotune")}
    differences = common.differences(steps, "eager")
    times = common.time_variants(steps, args.graphs, args.rounds)
    breakdowns = {name: common.breakdown(steps[name], args.profile_steps) for name in names} if args.breakdown else {}
    waits = {name: common.waits(steps[name], args.profile_steps) for name in names} if args.breakdown else {}
    goals = common.goals_table(times, GOALS, kernels)
    env = environment.environment()
    setup = [
        (
            f"U-Net block ({args.impl}) forward, batch {args.batch}, {args.channels}x{args.latent}x{args.latent} "
            f"latents, {args.heads} heads, {args.groups} groups, context {args.context}x{args.context_dim}, "
            f"{args.dtype}"
        ),
        f"{args.rounds} timing rounds",
    ]
    text = common.markdown(
        "End-to-end: Stable-Diffusion-style U-Net ResNet + attention block, forward",
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
        [],
        waits,
    )
    common.save(
        args.out, common.data(env, args, times, goals, kernels, differences, patch_report, breakdowns, [], waits), text
    )


if __name__ == "__main__":
    main()
