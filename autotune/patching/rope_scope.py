"""Routing transformers' rotary embeddings: a Llama-family attention forward (Llama, Mistral, Qwen2/3, Gemma, ...)
calls `apply_rotary_pos_emb(q, k, cos, sin)`, a function of its modeling module that it looks up as a global at call
time. A patched attention module runs its forward in a scope where that global is `routing` function of its modeling
module, which sends the calls of the thread running a patched forward to `autotune.kernels.rope.rope` where it takes
them (and the stored rows say so, under the "measured" policy), and any other call to the original function; the
outermost patched forward's end puts the original back, so nothing outside a patched forward sees a change and
`autotune.unpatch` leaves the module as it was.

Modules are patched only where the modeling module's apply_rotary_pos_emb and rotate_half are Llama's (compared by
bytecode: the same math). Calls rope does not take run the original: an unsqueeze_dim other than 1 or position_ids
given, cos and sin not (B or 1, N, D) for q (B, H, N, D) (partial rotary), an odd head dim, mixed dtypes, cos or
sin that need gradients. Under torch.compile nothing is swapped: the original's torch ops are traced, and compile
fuses them itself. Patched forwards running in several threads at once may leave some of their calls on torch."""

from __future__ import annotations

import dis
import functools
import inspect
import sys
import threading
import types
from collections.abc import Callable

import torch

from autotune.kernels.rope import rope
from autotune.nn import support
from autotune.nn.routing import fell_back, route, routed
from autotune.patching.context import PatchContext

NAME = "apply_rotary_pos_emb"
_SCOPE = threading.local()
"""`policy`: the routing policy of the patched forward this thread is in, None (or unset) outside one."""
_ROUTERS: dict[str, tuple[Callable, Callable]] = {}
"""Modeling module name -> (its original apply_rotary_pos_emb, the routing function that stands in for it)."""
_PLAIN = {"unsqueeze_dim": 1, "position_ids": None}
"""The optional arguments rope takes, at the values it takes: heads in dim 1, cos and sin already gathered."""


def _decide(settings: tuple, q, k, cos, sin) -> bool | str:
    for t in (q, k, cos, sin):
        why = support.tensor(t)
        if why is not None:
            return why
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or sin.shape != cos.shape:
        return "not (B, H, N, D) queries and keys with (B or 1, N, D) cos and sin"
    b, h, n, d = q.shape
    if k.shape[0] != b or k.shape[2:] != q.shape[2:] or cos.shape[0] not in (1, b) or cos.shape[1] != n:
        return "q, k, cos and sin of batches or positions that differ"
    if cos.shape[2] != d:
        return "partial rotary: cos and sin span another width than the head dim"
    if d % 2:
        return "an odd head dim"
    if not (q.dtype is k.dtype is cos.dtype is sin.dtype):
        return "q, k, cos and sin in more than one dtype"
    if not (q.get_device() == k.get_device() == cos.get_device() == sin.get_device()):
        return "tensors on more than one device"
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        return "cos or sin needs a gradient"
    if q.numel() == 0 or k.numel() == 0:
        return "empty input"
    return routed(settings[1], "rope", q.dtype, b, h, k.shape[1], n, d, support.grad_needed(q, k))


@functools.cache
def _signature(fn: Callable) -> inspect.Signature:
    return inspect.signature(fn)


def _takes(original: Callable, q, k, cos, sin, args: tuple, kwargs: dict) -> bool:
    """Whether a call's optional arguments are ones rope takes (only checked where a call passes any)."""
    try:
        bound = _signature(original).bind(q, k, cos, sin, *args, **kwargs)
    except TypeError:
        return False  # the original raises its own error
    extras = list(bound.arguments.items())[4:]
    return all(
        name in _PLAIN and (value is None if _PLAIN[name] is None else value == _PLAIN[name]) for name, value in extras
    )


def _make_router(original: Callable) -> Callable:
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        policy = getattr(_SCOPE, "policy", None)
        if policy is None or torch.compiler.is_compiling():
            return original(q, k, cos, sin, *args, **kwargs)
        if (args or kwargs) and not _takes(original, q, k, cos, sin, args, kwargs):
            fell_back("rope", "unsqueeze_dim other than 1, or position_ids given")
            return original(q, k, cos, sin, *args, **kwargs)
        if route(("rope", policy, "transformers"), _decide, q, k, cos, sin) is True:
            return rope(q, k, cos, sin)
        return original(q, k, cos, sin, *args, **kwargs)

    apply_rotary_pos_emb.__wrapped__ = original
    return apply_rotary_pos_emb


def _router(modeling: types.ModuleType) -> tuple[Callable, Callable]:
    found = _ROUTERS.get(modeling.__name__)
    if found is None:
        original = getattr(modeling, NAME)
        found = _ROUTERS[modeling.__name__] = (original, _make_router(original))
    return found


def call_routed(policy: str, modeling: types.ModuleType, fn: Callable, *args, **kwargs):
    """fn(*args, **kwargs) with modeling's apply_rotary_pos_emb calls routed under policy."""
    original, router = _router(modeling)
    current = getattr(modeling, NAME, None)
    if torch.compiler.is_compiling() or (current is not original and current is not router):
        return fn(*args, **kwargs)  # someone else replaced the function since: theirs runs
    outer = getattr(_SCOPE, "policy", None)
    _SCOPE.policy = policy
    setattr(modeling, NAME, router)
    try:
        return fn(*args, **kwargs)
    finally:
        _SCOPE.policy = outer
        if outer is None:  # the outermost patched forward of this thread
            setattr(modeling, NAME, original)


class _RoutesRope:
    """Mixed in before a transformers attention class: its forward's apply_rotary_pos_emb calls are routed with the
    patch's policy."""

    _autotune_policy: str

    def forward(self, *args, **kwargs):
        modeling = sys.modules[type(self).__module__]
        return call_routed(self._autotune_policy, modeling, super().forward, *args, **kwargs)


@functools.cache
def _routing_class(cls: type) -> type:
    return type(cls.__name__, (_RoutesRope, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})


def _same_code(a: object, b: object) -> bool:
    a, b = inspect.unwrap(a), inspect.unwrap(b)
    ca, cb = getattr(a, "__code__", None), getattr(b, "__code__", None)
    return ca is not None and cb is not None and (ca.co_code, ca.co_names) == (cb.co_code, cb.co_names)


@functools.cache
def _llamas_rope(modeling_name: str) -> bool:
    """Whether a modeling module's apply_rotary_pos_emb and rotate_half are Llama's."""
    from transformers.models.llama import modeling_llama

    modeling = sys.modules.get(modeling_name)
    return all(
        _same_code(getattr(modeling, name, None), getattr(modeling_llama, name)) for name in (NAME, "rotate_half")
    )


@functools.cache
def _forward_calls_rope(forward: Callable) -> bool:
    code = getattr(inspect.unwrap(forward), "__code__", None)
    return code is not None and any(i.opname == "LOAD_GLOBAL" and i.argval == NAME for i in dis.get_instructions(code))


def route_rope_calls(ctx: PatchContext) -> None:
    """Patch each transformers attention module whose forward calls its modeling module's Llama-style
    apply_rotary_pos_emb (and names no F.scaled_dot_product_attention, which the sdpa rule routes)."""
    from autotune.patching.sdpa_scope import calls_sdpa

    for path, module in ctx.modules():
        cls = type(module)
        if not cls.__module__.startswith("transformers.") or not _forward_calls_rope(cls.forward):
            continue
        if not _llamas_rope(cls.__module__):
            ctx.record(path, module, "torch", f"its {NAME} is not Llama's (rotate_half convention)")
            continue
        if calls_sdpa(module):
            continue
        ctx.swap_class(module, _routing_class(cls), _autotune_policy=ctx.policy)
        ctx.record(path, cls.__name__, "rope", f"its {NAME} calls go to rope where it takes them")
