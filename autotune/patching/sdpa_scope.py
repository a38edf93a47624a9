"""Routing a model's F.scaled_dot_product_attention calls: each module whose forward (or, for a diffusers
Attention, its processor) names the function runs its forward inside `autotune.nn.route_sdpa`. The mode sees
every torch call made inside it, so it is entered only around those modules, not the whole model; a call made
elsewhere (a helper that the forward does not name) is not routed: wrap it in `autotune.nn.route_sdpa()` yourself."""

from __future__ import annotations

import functools
import inspect

import torch

from autotune.nn import route_sdpa
from autotune.patching.context import PatchContext

_NAME = "scaled_dot_product_attention"


@functools.cache
def _source_names_sdpa(fn) -> bool:
    try:
        return _NAME in inspect.getsource(fn)
    except (OSError, TypeError):  # built-in or without source: nothing to read
        return False


def calls_sdpa(module: torch.nn.Module) -> bool:
    """Whether module's forward, or its attention processor's __call__, names scaled_dot_product_attention."""
    if type(module).__module__.startswith("autotune.") or type(module).forward is torch.nn.Module.forward:
        return False
    if _source_names_sdpa(type(module).forward):
        return True
    processor = getattr(module, "processor", None)
    return processor is not None and _source_names_sdpa(type(processor).__call__)


class _RoutesSdpa:
    """Mixed in before a module's class: its forward runs inside route_sdpa with the patch's policy."""

    _autotune_policy: str

    def forward(self, *args, **kwargs):
        with route_sdpa(self._autotune_policy):
            return super().forward(*args, **kwargs)


@functools.cache
def routing_class(cls: type) -> type:
    """cls with its forward inside route_sdpa (named as cls, so the model prints as before)."""
    return type(cls.__name__, (_RoutesSdpa, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})


def route_sdpa_calls(ctx: PatchContext) -> None:
    for path, module in ctx.modules():
        if calls_sdpa(module):
            ctx.record(
                path,
                module,
                "flash_attn",
                "its F.scaled_dot_product_attention calls go to flash_attn where it takes them",
            )
            ctx.swap_class(module, routing_class(type(module)), _autotune_policy=ctx.policy)
