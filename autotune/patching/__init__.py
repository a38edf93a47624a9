"""`autotune.patch(model)`: put the tuned kernels inside a model, in place and reversibly (`autotune.unpatch`).

What it serves: torch.nn LayerNorm, RMSNorm and GroupNorm; GroupNorm + SiLU/Mish and Linear + ReLU/GELU/SiLU
neighbours in an nn.Sequential, fused; F.scaled_dot_product_attention calls of modules whose forward makes them;
and, where those packages are installed, transformers' Llama-style RMSNorm, gated MLP, rotary embedding and sdpa
attention and diffusers' ResnetBlock2D GroupNorm + SiLU. Under the default policy each call runs the kernels only
where this GPU's stored rows show them at least as fast as torch on its dtype and shape bucket, so a patch never
makes a model slower by the rows' evidence; `force=True` runs them on every call they take."""

from __future__ import annotations

import torch

from autotune import runtime
from autotune.nn import routing
from autotune.patching.context import PatchContext
from autotune.patching.diffusers_models import patch_diffusers
from autotune.patching.report import Change, PatchReport
from autotune.patching.sdpa_scope import route_sdpa_calls
from autotune.patching.torch_modules import count_plain_linears, fuse_sequential_pairs, swap_norms
from autotune.patching.transformers_models import patch_transformers

_ATTRIBUTE = "_autotune_patch"
"""Where a patched model keeps its PatchContext (a plain attribute: not in its state_dict)."""
_STEPS = (patch_diffusers, patch_transformers, fuse_sequential_pairs, swap_norms, route_sdpa_calls, count_plain_linears)
"""In this order: the library rules first (they know their modules' forwards), then the generic torch ones."""


def patch(model: torch.nn.Module, *, force: bool = False) -> PatchReport:
    """Route model's supported modules and attention calls to the tuned kernels, in place; returns what was
    replaced and what was left, and why (`print(report)`; `report.calls()` after running it shows how each call
    shape was routed).

    Modules keep their identity, parameters, buffers, hooks and state_dict keys: an optimizer built before still
    holds the same parameters, and a checkpoint loads before or after. The patched model works under
    torch.compile; `autotune.unpatch(model)` restores it as it was (do so before pickling the whole model: the
    patched classes are made at run time).

    Args:
        force: run the kernels on every call they take (policy "always"), whatever the stored rows say. Without
            it (policy "measured") a call runs them only where the stored row of each kernel it launches (the
            backward's too when autograd records) for this GPU, dtype and shape bucket shows the kernel at least as
            fast as torch, and torch runs it elsewhere.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if _ATTRIBUTE in model.__dict__:
        raise ValueError("model is already patched; autotune.unpatch(model) first")
    ctx = PatchContext(model, "always" if force else "measured")
    routing.clear()  # decide on the databases as they are now
    runtime.clear_cache()
    try:
        for step in _STEPS:
            step(ctx)
    except BaseException:
        ctx.undo()
        raise
    order = {path: i for i, (path, _) in enumerate(model.named_modules())}
    ctx.report.changes.sort(key=lambda change: order.get(change.path, len(order)))
    model.__dict__[_ATTRIBUTE] = ctx
    return ctx.report


def unpatch(model: torch.nn.Module) -> None:
    """Undo `autotune.patch(model)`: every module gets its own class (and place) back."""
    ctx = model.__dict__.get(_ATTRIBUTE)
    if ctx is None:
        raise ValueError("model is not patched by autotune.patch")
    if ctx.model is not model:
        raise ValueError(
            "model is a copy of a patched model, whose modules it cannot restore: unpatch the original, then copy it"
        )
    ctx.undo()
    del model.__dict__[_ATTRIBUTE]


__all__ = ["Change", "PatchReport", "patch", "unpatch"]
