"""The shared-memory layout of a TMA descriptor's tiles, made once per block shape and dtype: the Gluon kernels'
launchers build several descriptors a call (six for a gated Hopper GEMM), and making the layout each time cost a
descriptor 14.6 us of host time against 8.8 (this 2-core CPU). Call only where Gluon is present (the launchers'
modules check)."""

from __future__ import annotations

import functools

import torch


@functools.cache
def nvmma_layout(block: tuple[int, ...], dtype: torch.dtype):
    """Gluon's default NVMMA shared layout for `block` tiles of dtype (bf16, fp16 or fp32): a frozen value, shared."""
    from triton.experimental.gluon import language as gl

    element = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for(list(block), element)
