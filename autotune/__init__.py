"""autotune: search, verify and ship tuned Triton kernel configs."""

from autotune import gpu as _gpu

_gpu.select_backend()  # before anything imports Triton

from autotune.runtime.registry import get, names, register  # noqa: E402
from autotune.space import InvalidConfig, Param, SearchSpace  # noqa: E402
from autotune.spec import Cost, EarlierSpace, KernelSpec  # noqa: E402

__version__ = "0.1.0"


_LAZY = {"tune": "userkernel", "Tensor": "userkernel", "patch": "patching", "unpatch": "patching"}
"""Public names whose modules import Triton, Hypothesis or every kernel: loaded when first used, not on import."""


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"autotune.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


__all__ = [
    "Cost",
    "EarlierSpace",
    "InvalidConfig",
    "KernelSpec",
    "Param",
    "SearchSpace",
    "Tensor",
    "get",
    "names",
    "patch",
    "register",
    "tune",
    "unpatch",
]
