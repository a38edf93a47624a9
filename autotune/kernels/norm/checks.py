"""Argument checks of the norms, run on every call before any launch: layer_norm's and rms_norm's common spellings
take a few attribute reads, anything else the general path with its clear errors; group_norm's arguments."""

from __future__ import annotations

import math
import numbers
import operator
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


def group_norm_arguments(x, num_groups, weight, bias, eps, activation) -> int:
    """group_norm's arguments checked before any launch (clear errors, never a device crash); num_groups as an int."""
    _checks.float_tensor("x", x)
    if x.dim() < 2:
        raise ValueError(f"x must have at least 2 dims (N, C, *), got shape {tuple(x.shape)}")
    try:
        num_groups = operator.index(num_groups)
    except TypeError:
        raise TypeError(f"num_groups must be an int, got {type(num_groups).__name__}") from None
    c = x.shape[1]
    if num_groups < 1 or c % num_groups:
        raise ValueError(
            f"num_groups={num_groups} must be >= 1 and divide the {c} channels of x (shape {tuple(x.shape)})"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            _checks.float_tensor(name, t)
            if t.shape != (c,):
                raise ValueError(f"{name} must have shape ({c},) (the channels of x), got {tuple(t.shape)}")
            _checks.same_device("x", x, name, t)
            _checks.same_dtype("x", x, name, t)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    if activation is not None and activation not in ("silu", "mish"):
        raise ValueError(f"activation must be None, 'silu' or 'mish', got {activation!r}")
    return num_groups
