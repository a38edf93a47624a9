"""The shipped kernels, tuned per GPU: call them like their PyTorch counterparts."""

from autotune.kernels.flash_attn import flash_attn
from autotune.kernels.fused_softmax import softmax
from autotune.kernels.group_norm import group_norm
from autotune.kernels.layer_norm import layer_norm, rms_norm
from autotune.kernels.matmul import linear, matmul
from autotune.kernels.mlp import mlp
from autotune.kernels.vector_add import add

__all__ = ["add", "flash_attn", "group_norm", "layer_norm", "linear", "matmul", "mlp", "rms_norm", "softmax"]
