"""Attention: flash_attn's forward (prefill and split-key decode) and its backward, with float64 references."""

from autotune.kernels.attention.flash_attn import SPEC as FLASH_ATTN
from autotune.kernels.attention.flash_attn_backward import SPEC as FLASH_ATTN_BACKWARD

SPECS = (FLASH_ATTN, FLASH_ATTN_BACKWARD)
