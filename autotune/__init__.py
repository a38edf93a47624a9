"""autotune: search, verify and ship tuned Triton kernel configs."""

from autotune import gpu as _gpu

_gpu.select_backend()  # before anything imports Triton

from autotune.runtime.registry import get, names, register  # noqa: E402
from autotune.space import InvalidConfig, Param, SearchSpace  # noqa: E402
from autotune.spec import Cost, KernelSpec  # noqa: E402

__version__ = "0.1.0"


def __getattr__(name: str):
    # `tune` and `Tensor` import Triton and Hypothesis: only when a user kernel asks for them.
    if name in ("tune", "Tensor"):
        from autotune import userkernel

        return getattr(userkernel, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


__all__ = ["Cost", "InvalidConfig", "KernelSpec", "Param", "SearchSpace", "Tensor", "get", "names", "register", "tune"]
