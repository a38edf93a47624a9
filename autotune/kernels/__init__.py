"""The shipped kernels, tuned per GPU: call them like their PyTorch counterparts.

Each family is a folder (its Triton code, launcher and autograd, spec, problems and checks) that lists its
specs in `SPECS`; the registry is built from `FAMILIES`. `rope` is its family's package: its public function is
`autotune.kernels.rope.rope`."""

from autotune.kernels import attention, fused_softmax, gemm, norm, rope, vector_add
from autotune.kernels.attention.flash_attn import flash_attn
from autotune.kernels.fused_softmax.softmax import softmax
from autotune.kernels.gemm.gated_mlp import gated_mlp
from autotune.kernels.gemm.matmul import linear, matmul
from autotune.kernels.gemm.mlp import mlp
from autotune.kernels.norm.group_norm import group_norm
from autotune.kernels.norm.layer_norm import layer_norm, rms_norm
from autotune.kernels.vector_add.add import add

FAMILIES = (vector_add, fused_softmax, norm, gemm, attention, rope)
"""The kernel families, each listing its specs in `SPECS`."""

__all__ = ["add", "flash_attn", "gated_mlp", "group_norm", "layer_norm", "linear", "matmul", "mlp", "rms_norm", "softmax"]
