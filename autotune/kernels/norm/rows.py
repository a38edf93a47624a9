"""Tensors as the norm kernels address them: (rows, N) views, rows of unit stride, flat parameters."""

from __future__ import annotations

import math

import torch


def unit_stride(t: torch.Tensor | None) -> torch.Tensor | None:
    """t (rows, N) with elements of a row adjacent: the kernels address rows by one stride only."""
    if t is None or t.stride(1) == 1 or t.shape[1] <= 1:
        return t
    return t.contiguous()


def as_rows(t: torch.Tensor | None, norm_dims: int) -> torch.Tensor | None:
    """t as (rows, N), its last norm_dims dims flattened into N: a view where strides allow, else a copy."""
    if t is None:
        return None
    split = t.dim() - norm_dims
    return t.reshape(math.prod(t.shape[:split]), math.prod(t.shape[split:]))


def mixed_params(x: torch.Tensor, *params: torch.Tensor | None) -> bool:
    """Whether a parameter's dtype differs from x's (float32 weight or bias on half data)."""
    return any(p is not None and p.dtype != x.dtype for p in params)


def flat(t: torch.Tensor | None) -> torch.Tensor | None:
    """A weight or bias as one contiguous row (None stays None)."""
    return None if t is None else t.reshape(-1).contiguous()
