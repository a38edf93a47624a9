"""Rotary position embedding of queries and keys (transformers' rotate_half convention), forward and backward
kernels, and the public function (autograd through the tuned backward)."""

from autotune.kernels.rope.rope_backward import SPEC as ROPE_BACKWARD
from autotune.kernels.rope.rotary import SPEC as ROPE
from autotune.kernels.rope.rotary import rope

SPECS = (ROPE, ROPE_BACKWARD)

__all__ = ["SPECS", "rope"]
