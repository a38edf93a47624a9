"""The GEMM family: matmul, linear (bias and activation fused) and mlp (Linear -> activation -> Linear), all on
one tiled/persistent Triton GEMM (gemm.py)."""

from autotune.kernels.gemm.matmul import LINEAR, MATMUL
from autotune.kernels.gemm.mlp import MLP

SPECS = (MATMUL, LINEAR, MLP)
