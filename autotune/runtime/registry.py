"""The kernel registry: shipped kernels by name, user kernels by `register` or a `module:attr` path."""

from __future__ import annotations

import importlib

from autotune.spec import KernelSpec

_SHIPPED: dict[str, KernelSpec] = {}  # built from the kernel families on first use
_REGISTERED: dict[str, KernelSpec] = {}


class UnknownKernel(LookupError):
    """No kernel by that name, and no `module:attr` path that leads to a KernelSpec."""


def _shipped() -> dict[str, KernelSpec]:
    """The shipped kernels by name, as their families list them."""
    if not _SHIPPED:
        from autotune import kernels

        _SHIPPED.update({spec.name: spec for family in kernels.FAMILIES for spec in family.SPECS})
    return _SHIPPED


def register(spec: KernelSpec, *, replace: bool = False) -> KernelSpec:
    """Make a user kernel known by its name to verify, search, query and the runtime."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"register() takes a KernelSpec, got {type(spec).__name__}")
    if not replace and (spec.name in _shipped() or spec.name in _REGISTERED):
        if _REGISTERED.get(spec.name) is not spec:
            raise ValueError(f"a kernel named {spec.name!r} is already registered (pass replace=True)")
    _REGISTERED[spec.name] = spec
    return spec


def names() -> list[str]:
    """Names of all shipped and registered kernels."""
    return sorted(set(_shipped()) | set(_REGISTERED))


def shipped() -> list[str]:
    """Names of the kernels shipped in the package (each backward kernel by its own name)."""
    return sorted(_shipped())


def is_shipped(name: str) -> bool:
    """Whether name is a kernel shipped in the package (a fresh process finds it by name alone)."""
    return name in _shipped()


def get(name: str) -> KernelSpec:
    """The spec for a registered name, a shipped name, or a `module:attr` path to a KernelSpec."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if ":" in name:  # no shipped name has one
        return _load(name)
    if name in _shipped():
        return _SHIPPED[name]
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
    if isinstance(getattr(obj, "spec", None), KernelSpec):  # a launcher under @autotune.tune
        obj = obj.spec
    if not isinstance(obj, KernelSpec):  # never called, whatever it is: a path names a spec, not code to run
        raise UnknownKernel(f"{path!r} is a {type(obj).__name__}, not a KernelSpec")
    return obj
