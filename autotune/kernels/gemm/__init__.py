"""The GEMM family: matmul, linear (bias and activation fused) and mlp (Linear -> activation -> Linear), all on
one tiled/persistent Triton GEMM (gemm.py); gated_mlp (down(act(gate(x)) * up(x))), whose gate and up projections
run as one GEMM with two accumulators (gated.py), and its backward's elementwise step, gated_mlp_backward, a tuned
kernel of its own (gated_backward.py)."""

from autotune.kernels.gemm.gated_backward import SPEC as GATED_MLP_BACKWARD
from autotune.kernels.gemm.gated_mlp import GATED_MLP
from autotune.kernels.gemm.matmul import LINEAR, MATMUL
from autotune.kernels.gemm.mlp import MLP

SPECS = (MATMUL, LINEAR, MLP, GATED_MLP, GATED_MLP_BACKWARD)
