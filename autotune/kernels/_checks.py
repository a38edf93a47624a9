"""Argument checks the public kernels run before any launch: clear errors, never a device crash."""

from __future__ import annotations

import torch

from autotune import gpu

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_KERNEL_DEVICE_TYPE = "cpu" if gpu.interpreter_active() else "cuda"  # fixed once Triton is imported


def float_tensor(name: str, t: object, dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES) -> torch.Tensor:
    """t must be a tensor of one of dtypes, on the device the kernels run on."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name} must have a floating dtype in ({names}), got {str(t.dtype).removeprefix('torch.')}")
    expected = _KERNEL_DEVICE_TYPE
    if t.device.type != expected:
        where = "the CPU (Triton interpreter)" if expected == "cpu" else "a CUDA device"
        raise ValueError(f"{name} must be on {where}, got a tensor on {t.device}")
    return t


def same_device(**tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise ValueError("tensors must be on one device, got " + ", ".join(f"{n} on {d}" for n, d in devices.items()))


def same_dtype(**tensors: torch.Tensor) -> None:
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        raise TypeError("tensors must have one dtype, got " + ", ".join(f"{n} {d}" for n, d in dtypes.items()))


def same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError("tensors must have one shape, got " + ", ".join(f"{n} {s}" for n, s in shapes.items()))
