"""diffusers U-Nets (only where diffusers is already imported): each ResnetBlock2D's GroupNorm + SiLU pairs (norm1
then the nonlinearity, norm2 then the nonlinearity) run as the tuned group_norm with the activation fused.

The block's nonlinearity module also acts on the time embedding, so it cannot simply be replaced: the block gets a
forward that calls the fused norms and skips the nonlinearity after them, a copy of diffusers' forward for
`time_embedding_norm="default"`. It is used only where diffusers' forward is the one it copies (compared by a hash
of its source); a block of another diffusers version, of another time-embedding norm or with hooks is left."""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
import textwrap

import torch

from autotune import nn as tuned
from autotune.patching.context import PatchContext

COPIED_FORWARDS = frozenset({"a30ae9277b79e8d2"})
"""sha256 (16 hex digits) of the dedented source of the ResnetBlock2D.forward `_FusedResnetBlock2D.forward`
copies: diffusers 0.42."""
_ACTIVATIONS = {torch.nn.SiLU: "silu", torch.nn.Mish: "mish"}


def _source_hash(fn) -> str:
    try:
        return hashlib.sha256(textwrap.dedent(inspect.getsource(fn)).encode()).hexdigest()[:16]
    except (OSError, TypeError):
        return ""


class _FusedResnetBlock2D:
    """diffusers' ResnetBlock2D.forward (time_embedding_norm "default") with norm1 and norm2 applying the
    nonlinearity themselves."""

    def forward(self, input_tensor: torch.Tensor, temb: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        hidden_states = self.norm1(input_tensor)  # the nonlinearity fused
        if self.upsample is not None:
            if hidden_states.shape[0] >= 64:
                input_tensor = input_tensor.contiguous()
                hidden_states = hidden_states.contiguous()
            input_tensor = self.upsample(input_tensor)
            hidden_states = self.upsample(hidden_states)
        elif self.downsample is not None:
            input_tensor = self.downsample(input_tensor)
            hidden_states = self.downsample(hidden_states)
        hidden_states = self.conv1(hidden_states)
        if self.time_emb_proj is not None:
            if not self.skip_time_act:
                temb = self.nonlinearity(temb)
            temb = self.time_emb_proj(temb)[:, :, None, None]
        if temb is not None:
            hidden_states = hidden_states + temb
        hidden_states = self.norm2(hidden_states)  # the nonlinearity fused
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.conv2(hidden_states)
        if self.conv_shortcut is not None:
            if self.training:
                input_tensor = input_tensor.contiguous()
            input_tensor = self.conv_shortcut(input_tensor)
        return (input_tensor + hidden_states) / self.output_scale_factor


@functools.cache
def _fused_class(cls: type) -> type:
    names = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    return type(cls.__name__, (_FusedResnetBlock2D, cls), names)


def _blocker(ctx: PatchContext, block: torch.nn.Module) -> str | None:
    if _source_hash(type(block).forward) not in COPIED_FORWARDS:
        return "its forward is not the diffusers version the fused forward copies"
    if block.time_embedding_norm != "default":
        return f"time_embedding_norm {block.time_embedding_norm!r} (only 'default' is fused)"
    if type(block.nonlinearity) not in _ACTIVATIONS:
        return f"nonlinearity {type(block.nonlinearity).__name__} (only SiLU and Mish fuse)"
    if block._forward_hooks or block._forward_pre_hooks:
        return "it has hooks"
    for name in ("norm1", "norm2"):
        norm = getattr(block, name)
        if type(norm) is not torch.nn.GroupNorm:
            return f"{name} is a {type(norm).__name__}, not a GroupNorm"
        why = ctx.fusion_blocker(norm, block.nonlinearity)
        if why is not None:
            return f"{name}: {why}"
    return None


def patch_diffusers(ctx: PatchContext) -> None:
    if "diffusers" not in sys.modules:
        return
    from diffusers.models.resnet import ResnetBlock2D

    for path, block in ctx.modules():
        if not isinstance(block, ResnetBlock2D):
            continue
        why = _blocker(ctx, block) if type(block) is ResnetBlock2D else "a subclass of ResnetBlock2D"
        if why is not None:
            ctx.record(path, block, "torch", f"GroupNorm + {type(block.nonlinearity).__name__} not fused: {why}")
            continue
        activation = _ACTIVATIONS[type(block.nonlinearity)]
        for name in ("norm1", "norm2"):
            ctx.swap_class(getattr(block, name), tuned.GroupNorm, activation=activation, policy=ctx.policy)
            ctx.record(
                f"{path}.{name}",
                f"GroupNorm + {type(block.nonlinearity).__name__}",
                f"group_norm+{activation}",
                "fused in the block's forward",
            )
        ctx.swap_class(block, _fused_class(ResnetBlock2D))
