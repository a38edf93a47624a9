"""Your own Triton kernel in a few lines: `@autotune.tune(...)` over a launcher builds its KernelSpec (search space
from a triton.Config list, problems from symbolic tensor sizes, float64 reference) and serves its tuned configs."""

from autotune.userkernel.arguments import Tensor
from autotune.userkernel.decorator import TunedKernel, tune

__all__ = ["Tensor", "TunedKernel", "tune"]
