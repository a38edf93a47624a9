"""Argument checks the public kernels run before any launch: clear errors, never a device crash.

They sit on every call's path, so each is a few attribute reads; messages are built only on failure.
"""

from __future__ import annotations

import torch

from autotune import gpu

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_ON_CUDA = not gpu.interpreter_active()  # fixed once Triton is imported
EAGER_TYPES = (torch.Tensor, torch.nn.Parameter)
"""Types of tensor whose eager calls may skip a custom op's dispatch; subclasses (fake tensors among them)
go through the op, whose fake implementation they can run."""


def eager(*tensors: torch.Tensor | None) -> bool:
    """Whether a call on these tensors may skip its custom op: torch.compile is not tracing it, and each tensor
    (None for an absent one) is a plain torch.Tensor or Parameter."""
    if torch.compiler.is_compiling():
        return False
    for t in tensors:  # a loop, not all(...): this runs on every call's path
        if t is not None and type(t) not in EAGER_TYPES:
            return False
    return True


def _names(dtypes: tuple[torch.dtype, ...]) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


def float_tensor(name: str, t: object, dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES) -> torch.Tensor:
    """t must be a tensor of one of dtypes, on the device the kernels run on."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have a floating dtype in ({_names(dtypes)}), got {str(t.dtype).removeprefix('torch.')}")
    if (t.is_cuda if _ON_CUDA else t.is_cpu) is False:
        where = "a CUDA device" if _ON_CUDA else "the CPU (Triton interpreter)"
        raise ValueError(f"{name} must be on {where}, got a tensor on {t.device}")
    return t


def same_device(a_name: str, a: torch.Tensor, b_name: str, b: torch.Tensor) -> None:
    if a.get_device() != b.get_device():
        raise ValueError(f"tensors must be on one device, got {a_name} on {a.device}, {b_name} on {b.device}")


def same_dtype(a_name: str, a: torch.Tensor, b_name: str, b: torch.Tensor) -> None:
    if a.dtype is not b.dtype:
        raise TypeError(f"tensors must have one dtype, got {a_name} {a.dtype}, {b_name} {b.dtype}")


def same_shape(a_name: str, a: torch.Tensor, b_name: str, b: torch.Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"tensors must have one shape, got {a_name} {tuple(a.shape)}, {b_name} {tuple(b.shape)}")
