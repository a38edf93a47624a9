"""Whether a call is one the tuned kernels take: each check returns None, or a short reason why torch runs it
instead; reasons are constant strings. They run on the first call of a signature (`signature`): what the checks and
the routing read off a call's tensors, so later calls with the same signature reuse their answer."""

from __future__ import annotations

import torch

from autotune import gpu

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_KERNEL_DEVICE = "cpu" if gpu.interpreter_active() else "cuda"  # fixed once Triton is imported
_ON_KERNEL_DEVICE = "is_cpu" if _KERNEL_DEVICE == "cpu" else "is_cuda"  # a tensor's flag: cheaper than its device
GEMM_DTYPES = (torch.float32, torch.float16) if gpu.interpreter_active() else FLOAT_DTYPES
"""linear's and mlp's dtypes: the Triton interpreter computes bfloat16 tl.dot wrongly, so bfloat16 GEMMs need a GPU."""
MAX_HEAD_DIM = 256
"""flash_attn's largest head dim."""


def tensor(x: object, dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES) -> str | None:
    """x is a dense tensor of one of dtypes on the device the kernels run on, outside torch.autocast."""
    if not isinstance(x, torch.Tensor):
        return "not a tensor"
    if x.dtype not in dtypes:
        return f"dtype {str(x.dtype).removeprefix('torch.')} is not one the kernel takes"
    if not getattr(x, _ON_KERNEL_DEVICE):
        return f"on {x.device.type}, the kernels run on {_KERNEL_DEVICE}"
    if x.is_nested or x.layout is not torch.strided:
        return "not a dense tensor"
    if torch.is_autocast_enabled(_KERNEL_DEVICE):
        return "under torch.autocast, which decides this op's dtype"
    return None


def signature(settings: tuple, x: object, *others: torch.Tensor | None) -> tuple | None:
    """The key a call's route is remembered under (`routing.route`): the module's settings that its checks and
    routing read (its kind first), then, of x, shape, strides, dtype, device, layout and whether it requires grad;
    of each other tensor (None: absent) the same but strides; grad mode and autocast. None where the call is not
    remembered: x or another not a tensor or a nested one, or under torch.compile (decided while tracing)."""
    if torch.compiler.is_compiling() or not isinstance(x, torch.Tensor):
        return None
    try:
        key = [settings, torch.is_grad_enabled(), torch.is_autocast_enabled(_KERNEL_DEVICE)]
        key += (x.shape, x.stride(), x.dtype, x.device, x.layout, x.requires_grad)
        for t in others:
            key.append(None if t is None else (t.shape, t.dtype, t.device, t.layout, t.requires_grad))
    except (AttributeError, RuntimeError):  # not a tensor; a nested tensor, which has no shape or strides
        return None
    return tuple(key)


def parameter(module: torch.nn.Module, name: str) -> torch.Tensor | None:
    """module.<name>, read from its registered parameters where it is one: a read through nn.Module.__getattr__
    costs about 0.4 us on a CPU, a call's path reads two or three. Anything else (a parametrization's property, a
    plain attribute) is read as usual."""
    parameters = module._parameters
    return parameters[name] if name in parameters else getattr(module, name)


def param(p: torch.Tensor | None, x: torch.Tensor, *, float32_ok: bool) -> str | None:
    """A parameter (None: absent) is on x's device in x's dtype, or float32 where the kernel takes float32
    parameters."""
    if p is None:
        return None
    if p.get_device() != x.get_device():
        return "parameters on another device than the input"
    if p.dtype is x.dtype or (float32_ok and p.dtype is torch.float32):
        return None
    return "parameters in another dtype than the input"


def empty(x: torch.Tensor) -> str | None:
    """Nothing to compute: torch's path costs nothing and keeps its own conventions."""
    return "empty input" if x.numel() == 0 else None


def grad_needed(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records this call: then the backward kernels run too, and their rows count."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:  # a loop, not any(...): this runs on every call's path
        if t is not None and t.requires_grad:
            return True
    return False


def check_activation(activation: object, allowed) -> str | None:
    """A module's activation argument: None or one of allowed; else ValueError naming them."""
    if activation is not None and activation not in allowed:
        raise ValueError(f"activation must be None or one of {sorted(allowed)}, got {activation!r}")
    return activation  # type: ignore[return-value]
