"""Routing a model's F.scaled_dot_product_attention calls: each module whose forward (or, for a diffusers
Attention, its processor) names the function runs its forward in a scope whose sdpa calls go to
`autotune.nn.scaled_dot_product_attention`; a call made elsewhere (a helper that the forward does not name) is not
routed: wrap it in `autotune.nn.route_sdpa()` yourself.

The scope costs nothing for the torch calls it does not handle: for the forward's duration (`call_routed`),
`torch.nn.functional.scaled_dot_product_attention` is `routing_sdpa`, which routes the calls of the thread running
a routing forward and runs torch's function for any other; the forward's end puts torch's back. A forward that took
sdpa by name at import (`from torch.nn.functional import scaled_dot_product_attention`), which the attribute does
not reach, and a forward run while the attribute holds another function than torch's (someone else replaced it) run
inside `autotune.nn.route_sdpa` instead: a torch function mode, which sees every torch call made inside it (about
1 us each on a CPU). So does a forward under torch.compile, which traces the mode (the compiled code does not run
it) and never sees the attribute replaced: dynamo maps torch's functions by what those names hold when it first
looks. Routing forwards running in several threads at once may leave some of their sdpa calls on torch."""

from __future__ import annotations

import dis
import functools
import inspect
import threading
from collections.abc import Callable

import torch
import torch.nn.functional as F

from autotune.nn import route_sdpa, scaled_dot_product_attention
from autotune.nn.attention import TORCH_SDPA
from autotune.patching.context import PatchContext

_NAME = "scaled_dot_product_attention"
_SCOPE = threading.local()
"""`policy`: the routing policy of the routing forward this thread is in, None (or unset) outside one."""


def routing_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention during a routing forward (torch's signature): the calls of
    that forward's thread go to `autotune.nn.scaled_dot_product_attention`, any other to torch's function."""
    policy = None if torch.compiler.is_compiling() else getattr(_SCOPE, "policy", None)
    if policy is None:
        return TORCH_SDPA(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    return scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, policy=policy
    )


def call_routed(policy: str, fn: Callable, *args, **kwargs):
    """fn(*args, **kwargs) with its F.scaled_dot_product_attention calls routed under policy."""
    replaced = F.scaled_dot_product_attention
    if torch.compiler.is_compiling() or (replaced is not TORCH_SDPA and replaced is not routing_sdpa):
        with route_sdpa(policy):
            return fn(*args, **kwargs)
    outer = getattr(_SCOPE, "policy", None)
    _SCOPE.policy = policy
    F.scaled_dot_product_attention = routing_sdpa
    try:
        return fn(*args, **kwargs)
    finally:
        _SCOPE.policy = outer
        if outer is None:  # the outermost routing forward of this thread
            F.scaled_dot_product_attention = TORCH_SDPA


def _unwrapped(fn):
    try:
        return inspect.unwrap(fn)
    except ValueError:  # a cycle of __wrapped__
        return fn


@functools.cache
def _source_names_sdpa(fn) -> bool:
    try:
        return _NAME in inspect.getsource(fn)
    except (OSError, TypeError):  # built-in or without source: nothing to read
        return False


def _names_loaded_as_globals(code) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:  # nested functions, lambdas, comprehensions
        if inspect.iscode(const):
            names |= _names_loaded_as_globals(const)
    return names


@functools.cache
def _looks_sdpa_up_as_attribute(fn) -> bool:
    """Whether fn reaches sdpa only through torch.nn.functional's attribute at call time
    (`F.scaled_dot_product_attention`, `torch.nn.functional.scaled_dot_product_attention`), not through a name bound
    at import or through torch._C."""
    fn = _unwrapped(fn)
    code = getattr(fn, "__code__", None)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return code is not None and _NAME not in _names_loaded_as_globals(code) and "_nn." + _NAME not in source


def _sdpa_callers(module: torch.nn.Module) -> list:
    """The functions of module that name scaled_dot_product_attention: its forward, its attention processor's
    __call__."""
    if type(module).__module__.startswith("autotune.") or type(module).forward is torch.nn.Module.forward:
        return []
    found = [type(module).forward] if _source_names_sdpa(type(module).forward) else []
    processor = getattr(module, "processor", None)
    if processor is not None and _source_names_sdpa(type(processor).__call__):
        found.append(type(processor).__call__)
    return found


def calls_sdpa(module: torch.nn.Module) -> bool:
    """Whether module's forward, or its attention processor's __call__, names scaled_dot_product_attention."""
    return bool(_sdpa_callers(module))


class _RoutesSdpa:
    """Mixed in before a module's class: its forward's F.scaled_dot_product_attention calls are routed with the
    patch's policy."""

    _autotune_policy: str

    def forward(self, *args, **kwargs):
        return call_routed(self._autotune_policy, super().forward, *args, **kwargs)


class _RoutesSdpaByMode:
    """Mixed in before a module's class whose forward does not look sdpa up at call time: its forward runs inside
    route_sdpa (a torch function mode, which sees every torch call)."""

    _autotune_policy: str

    def forward(self, *args, **kwargs):
        with route_sdpa(self._autotune_policy):
            return super().forward(*args, **kwargs)


@functools.cache
def routing_class(cls: type, by_mode: bool = False) -> type:
    """cls with its forward's sdpa calls routed (named as cls, so the model prints as before)."""
    mixin = _RoutesSdpaByMode if by_mode else _RoutesSdpa
    return type(cls.__name__, (mixin, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})


def route_sdpa_calls(ctx: PatchContext) -> None:
    for path, module in ctx.modules():
        callers = _sdpa_callers(module)
        if not callers:
            continue
        by_mode = not all(_looks_sdpa_up_as_attribute(fn) for fn in callers)
        ctx.record(
            path,
            module,
            "flash_attn",
            "its F.scaled_dot_product_attention calls go to flash_attn where it takes them",
        )
        ctx.swap_class(module, routing_class(type(module), by_mode), _autotune_policy=ctx.policy)
