"""The kernel registry: shipped kernels by name, user kernels by `register` or a `module:attr` path."""

from __future__ import annotations

import importlib

from autotune.spec import KernelSpec

_SHIPPED = {
    "vector_add": "autotune.kernels.vector_add:SPEC",
    "softmax": "autotune.kernels.fused_softmax:SPEC",
    "softmax_backward": "autotune.kernels.softmax_backward:SPEC",
    "group_norm": "autotune.kernels.group_norm:SPEC",
    "group_norm_backward": "autotune.kernels.group_norm_backward:SPEC",
    "layer_norm": "autotune.kernels.layer_norm:LAYER_NORM",
    "layer_norm_backward": "autotune.kernels.layer_norm_backward:LAYER_NORM_BACKWARD",
    "rms_norm": "autotune.kernels.layer_norm:RMS_NORM",
    "rms_norm_backward": "autotune.kernels.layer_norm_backward:RMS_NORM_BACKWARD",
    "matmul": "autotune.kernels.matmul:MATMUL",
    "linear": "autotune.kernels.matmul:LINEAR",
    "mlp": "autotune.kernels.mlp:MLP",
    "flash_attn": "autotune.kernels.flash_attn:SPEC",
    "flash_attn_backward": "autotune.kernels.flash_attn_backward:SPEC",
}
_REGISTERED: dict[str, KernelSpec] = {}


class UnknownKernel(LookupError):
    """No kernel by that name, and no `module:attr` path that leads to a KernelSpec."""


def register(spec: KernelSpec, *, replace: bool = False) -> KernelSpec:
    """Make a user kernel known by its name to verify, search, query and the runtime."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"register() takes a KernelSpec, got {type(spec).__name__}")
    if not replace and (spec.name in _SHIPPED or spec.name in _REGISTERED):
        if _REGISTERED.get(spec.name) is not spec:
            raise ValueError(f"a kernel named {spec.name!r} is already registered (pass replace=True)")
    _REGISTERED[spec.name] = spec
    return spec


def names() -> list[str]:
    """Names of all shipped and registered kernels."""
    return sorted(set(_SHIPPED) | set(_REGISTERED))


def shipped() -> list[str]:
    """Names of the kernels shipped in the package (each backward kernel by its own name)."""
    return sorted(_SHIPPED)


def get(name: str) -> KernelSpec:
    """The spec for a registered name, a shipped name, or a `module:attr` path to a KernelSpec."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in _SHIPPED:
        spec = _load(_SHIPPED[name])
        _REGISTERED[name] = spec
        return spec
    if ":" in name:
        return _load(name)
    raise UnknownKernel(f"unknown kernel {name!r}; expected one of {names()} or a module:attr path")


def _load(path: str) -> KernelSpec:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownKernel(f"cannot import module {module_name!r} for kernel {path!r}: {exc}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise UnknownKernel(f"module {module_name!r} has no attribute {attr!r}") from None
    if callable(obj) and not isinstance(obj, KernelSpec):
        obj = obj()
    if not isinstance(obj, KernelSpec):
        raise UnknownKernel(f"{path!r} is a {type(obj).__name__}, not a KernelSpec")
    return obj
