"""Argument checks of layer_norm and rms_norm, run on every call before any launch: the common spellings
take a few attribute reads, anything else the general path with its clear errors."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from autotune.kernels.common import checks as _checks


def _normalized_shape(normalized_shape) -> tuple[int, ...]:
    kind = type(normalized_shape)
    if kind is int:  # the common spellings first, without abstract-class checks
        return (normalized_shape,)
    if (kind is tuple or kind is torch.Size) and normalized_shape and all(type(d) is int for d in normalized_shape):
        return normalized_shape
    dims = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else normalized_shape
    if (not isinstance(dims, Sequence) or isinstance(dims, str)
            or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims)):
        raise TypeError(f"normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}")
    if not dims:
        raise ValueError("normalized_shape must name at least one dim, got ()")
    return tuple(int(d) for d in dims)


def _check_param(name: str, t, x: torch.Tensor, shape: tuple[int, ...]) -> None:
    if t is None:
        return
    _checks.float_tensor(name, t, (x.dtype, torch.float32))
    _checks.same_device("x", x, name, t)
    if t.shape != shape:
        raise ValueError(f"{name} must have shape normalized_shape {tuple(shape)}, got {tuple(t.shape)}")


def check(x, normalized_shape, weight, bias, eps, residual, *, eps_may_be_none: bool) -> tuple[int, ...]:
    """The normalized shape as a tuple of ints, once every argument checks out; else TypeError or
    ValueError naming the argument."""
    _checks.float_tensor("x", x)
    shape = _normalized_shape(normalized_shape)
    rank = x.dim()
    if rank < len(shape) or x.shape[rank - len(shape):] != shape:
        raise ValueError(f"normalized_shape {tuple(shape)} must be the trailing dims of x, got x of shape {tuple(x.shape)}")
    _check_param("weight", weight, x, shape)
    _check_param("bias", bias, x, shape)
    if residual is not None:
        _checks.float_tensor("residual", residual)
        _checks.same_device("x", x, "residual", residual)
        _checks.same_dtype("x", x, "residual", residual)
        _checks.same_shape("x", x, "residual", residual)
    if type(eps) is float and 0.0 <= eps < math.inf or eps is None and eps_may_be_none:
        return shape
    if not isinstance(eps, numbers.Real) or isinstance(eps, bool):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    if not eps >= 0 or math.isinf(eps):
        raise ValueError(f"eps must be a finite float >= 0, got {eps}")
    return shape
