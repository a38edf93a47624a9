"""torch.nn modules: LayerNorm, RMSNorm and GroupNorm become their autotune.nn subclasses; in an nn.Sequential, a
GroupNorm followed by SiLU or Mish and a Linear followed by ReLU, GELU or SiLU are fused (the activation moves into
the module before it, and nn.Identity takes its place). Only exact torch classes: a subclass may have its own
forward."""

from __future__ import annotations

import torch

from autotune import nn as tuned
from autotune.patching.context import PatchContext

NORMS = {
    torch.nn.LayerNorm: (tuned.LayerNorm, "layer_norm"),
    torch.nn.RMSNorm: (tuned.RMSNorm, "rms_norm"),
    torch.nn.GroupNorm: (tuned.GroupNorm, "group_norm"),
}
_GROUP_NORM_ACTIVATIONS = {torch.nn.SiLU: "silu", torch.nn.Mish: "mish"}


def linear_activation(module: torch.nn.Module) -> str | None:
    """The GEMM epilogue's name of an activation module, or None where the epilogue has none like it."""
    kind = type(module)
    if kind is torch.nn.GELU:
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(module.approximate)
    return {torch.nn.ReLU: "relu", torch.nn.SiLU: "silu"}.get(kind)


def _pair(first: torch.nn.Module, second: torch.nn.Module) -> tuple[type, str, str] | None:
    """(autotune.nn class, activation, kernel) where second can be fused into first."""
    if type(first) is torch.nn.GroupNorm and type(second) in _GROUP_NORM_ACTIVATIONS:
        return tuned.GroupNorm, _GROUP_NORM_ACTIVATIONS[type(second)], "group_norm"
    if type(first) is torch.nn.Linear and linear_activation(second) is not None:
        return tuned.Linear, linear_activation(second), "linear"
    return None


def fuse_sequential_pairs(ctx: PatchContext) -> None:
    """Fuse each (GroupNorm, SiLU|Mish) and (Linear, activation) pair of neighbours in an nn.Sequential, whose
    forward passes one module's output only to the next."""
    for path, seq in ctx.modules():
        if type(seq) is not torch.nn.Sequential:
            continue
        names = list(seq._modules)
        i = 0
        while i + 1 < len(names):
            first, second = seq._modules[names[i]], seq._modules[names[i + 1]]
            pair = _pair(first, second) if first is not None and second is not None else None
            if pair is None:
                i += 1
                continue
            cls, activation, kernel = pair
            where = ".".join(p for p in (path, names[i]) if p)
            pair_name = f"{type(first).__name__} + {type(second).__name__}"
            blocker = ctx.fusion_blocker(first, second)
            if blocker is not None:
                ctx.record(where, pair_name, "torch", f"not fused: {blocker}")
                i += 1
                continue
            ctx.swap_class(first, cls, activation=activation, policy=ctx.policy)
            ctx.replace_child(seq, names[i + 1], torch.nn.Identity())
            ctx.record(
                where, pair_name, f"{kernel}+{activation}", f"{names[i + 1]} fused into {names[i]} (now nn.Identity)"
            )
            i += 2


def swap_norms(ctx: PatchContext) -> None:
    """Every remaining LayerNorm, RMSNorm and GroupNorm (without activation) becomes its autotune.nn class."""
    for path, module in ctx.modules():
        kind = type(module)
        if kind in NORMS:
            cls, kernel = NORMS[kind]
            ctx.swap_class(module, cls, policy=ctx.policy)
            ctx.record(path, kind.__name__, kernel)
        elif isinstance(module, tuple(NORMS)) and not isinstance(module, tuple(c for c, _ in NORMS.values())):
            ctx.mark_done(module)
            ctx.record(path, module, "torch", f"a subclass of {kind.__mro__[1].__name__} with a forward of its own")


def count_plain_linears(ctx: PatchContext) -> None:
    """One line for the Linear modules no rule served: their products stay on torch (cuBLAS)."""
    left = [path for path, m in ctx.modules() if type(m) is torch.nn.Linear]
    if left:
        ctx.record(
            f"{len(left)} module(s), e.g. {left[0] or '(model)'}",
            "Linear",
            "torch",
            "no activation after it in an nn.Sequential: nothing to fuse, and F.linear is the vendor's GEMM",
        )
