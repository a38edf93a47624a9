"""Outputs a launcher allocates itself, made checkable: while a tuned launcher runs for the gate or a timing, each
uninitialized allocation (`torch.empty`, `empty_like`, `empty_strided`, `Tensor.new_empty`) shaped like one of
the expected outputs is that output's buffer itself (the gate fills it with NaN first, so an element the kernel
never writes fails), and under the gate every other floating-point one is filled with NaN (scratch memory read
before it is written fails too). Without this the allocator would hand back memory that still holds the
reference's answer, and a kernel that writes nothing could pass."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.overrides import TorchFunctionMode

_UNINITIALIZED = frozenset({torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty})


class OutputClaims(TorchFunctionMode):
    """Within it, an uninitialized allocation with an expected output's shape, strides, dtype and device *is*
    that output (each claimed once, in allocation order); with `poison`, other floating-point ones are NaN."""

    def __init__(self, outputs: Sequence[torch.Tensor], *, poison: bool) -> None:
        super().__init__()
        self.unclaimed = list(outputs)
        self.poison = poison

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in _UNINITIALIZED and isinstance(result, torch.Tensor):
            for i, out in enumerate(self.unclaimed):
                if (
                    out.shape == result.shape
                    and out.dtype == result.dtype
                    and out.device == result.device
                    and out.stride() == result.stride()
                ):
                    return self.unclaimed.pop(i)
            if self.poison and result.is_floating_point():
                result.fill_(float("nan"))
        return result
