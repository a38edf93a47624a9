"""Attention with torch.nn.functional.scaled_dot_product_attention's semantics, through the tuned flash_attn where
it takes the arguments; and `route_sdpa`, which sends every sdpa call made inside a block there."""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from autotune import kernels
from autotune.nn import support
from autotune.nn.routing import check_policy, route, routed

TORCH_SDPA = torch.nn.functional.scaled_dot_product_attention
"""torch's function, as imported before anything could replace it."""


def _reason(query, key, value, attn_mask, dropout_p, scale, enable_gqa) -> str | None:
    if attn_mask is not None:
        return "an attn_mask (flash_attn takes is_causal only)"
    if dropout_p:
        return "dropout_p > 0"
    why = support.tensor(query) or support.tensor(key) or support.tensor(value)
    if why is not None:
        return why
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return "not 4-D (batch, heads, sequence, head dim) tensors"
    if key.dtype is not query.dtype or value.dtype is not query.dtype:
        return "q, k and v in different dtypes"
    if key.get_device() != query.get_device() or value.get_device() != query.get_device():
        return "q, k and v on different devices"
    batch, heads, nq, d = query.shape
    kv_heads, nk = key.shape[1], key.shape[2]
    if key.shape[0] != batch or value.shape[:3] != key.shape[:3]:
        return "batch sizes that broadcast, or k and v of different shapes"
    if not (key.shape[3] == value.shape[3] == d and 1 <= d <= support.MAX_HEAD_DIM):
        return f"head dims other than one size in 1..{support.MAX_HEAD_DIM}"
    if not (kv_heads == heads or kv_heads == 1 or enable_gqa and kv_heads and heads % kv_heads == 0):
        return "heads that torch would reject"
    if batch * heads * nq * nk == 0:
        return "empty input"
    if scale is not None and not math.isfinite(scale):
        return "a scale that is not finite"
    return None


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    policy: str = "always",
) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention, through the tuned flash_attn (forward and backward)
    where it takes the call; torch's sdpa elsewhere, and `autotune.nn.fallbacks()` says why: an attn_mask,
    dropout, tensors not 4-D or not float32/float16/bfloat16 on the kernels' device, under torch.autocast, head
    dims over 256 or differing, batch broadcasting, empty inputs. `policy` as for the modules: "measured" routes
    only where the stored rows of flash_attn (and its backward, when autograd records) show them at least as fast
    as torch."""
    settings = ("flash_attn", policy, attn_mask is None, dropout_p, is_causal, scale, enable_gqa)
    if route(settings, _decide, query, key, value) is True:
        return kernels.flash_attn(
            query, key, value, is_causal=bool(is_causal), scale=scale, enable_gqa=bool(enable_gqa)
        )
    return TORCH_SDPA(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def _decide(settings: tuple, query, key, value) -> bool | str:
    _, policy, no_mask, dropout_p, is_causal, scale, enable_gqa = settings
    why = _reason(query, key, value, None if no_mask else "a mask", dropout_p, scale, enable_gqa)
    if why is not None:
        return why
    batch, heads, nq, d = query.shape
    grad = support.grad_needed(query, key, value)
    return routed(
        policy, "flash_attn", query.dtype, batch, heads, key.shape[1], nq, key.shape[2], d, bool(is_causal), grad
    )


class route_sdpa(TorchFunctionMode):
    """Inside the block, every torch.nn.functional.scaled_dot_product_attention call runs as
    `autotune.nn.scaled_dot_product_attention(..., policy=policy)`; every other torch call is untouched.

    A torch function mode: it sees each torch call made in the block (about 1 us each on a CPU), so `patch`
    enters it only around the modules whose forward calls sdpa. It works under torch.compile."""

    def __init__(self, policy: str = "always") -> None:
        super().__init__()
        self.policy = check_policy(policy)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is TORCH_SDPA:
            return scaled_dot_product_attention(*args, **kwargs, policy=self.policy)
        return func(*args, **kwargs)
