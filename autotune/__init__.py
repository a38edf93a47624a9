"""autotune: search, verify and ship tuned Triton kernel configs."""

from autotune import gpu as _gpu

_gpu.select_backend()  # before anything imports Triton

from autotune.runtime.registry import get, names, register  # noqa: E402
from autotune.space import InvalidConfig, Param, SearchSpace  # noqa: E402
from autotune.spec import Cost, KernelSpec  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Cost", "InvalidConfig", "KernelSpec", "Param", "SearchSpace", "get", "names", "patch", "register", "unpatch"]


def __getattr__(name: str):
    # `autotune.patch` and `autotune.unpatch` import every kernel: only when first used, not on `import autotune`.
    if name in ("patch", "unpatch"):
        from autotune import patching

        return getattr(patching, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
