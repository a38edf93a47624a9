"""vector_add: elementwise x + y, the smallest kernel and the kernel contract's plainest example."""

from autotune.kernels.vector_add.add import SPEC

SPECS = (SPEC,)
