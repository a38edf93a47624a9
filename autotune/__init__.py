"""autotune: search, verify and ship tuned Triton kernel configs."""

from autotune import gpu as _gpu

_gpu.select_backend()  # before anything imports Triton

from autotune.runtime.registry import get, names, register  # noqa: E402
from autotune.space import InvalidConfig, Param, SearchSpace  # noqa: E402
from autotune.spec import Cost, KernelSpec  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Cost", "InvalidConfig", "KernelSpec", "Param", "SearchSpace", "get", "names", "register"]
