"""Test-only kernels that are wrong in known ways, to prove the gate and the search notice."""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

import autotune.kernels.vector_add.add as vector_add
from autotune import runtime

BAD_BLOCK = 2048


@triton.jit
def _tail_bug_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    y_mask = mask
    if BLOCK_SIZE >= 2048:
        # The bug: a partial last block forgets y, but only when there is more than one block.
        y_mask = mask & (offsets < tl.maximum(n - n % BLOCK_SIZE, BLOCK_SIZE))
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=y_mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offsets, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _static_fail_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    tl.static_assert(BLOCK_SIZE != 256, "this kernel cannot be built with BLOCK_SIZE=256")
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _input_bug_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    if BLOCK_SIZE >= 2048:
        # The bug: y counted twice whenever the first input element is above INPUT_BUG_THRESHOLD.
        first = tl.load(x_ptr).to(tl.float32)
        y = tl.where(first > 2.0, 2 * y, y)
    tl.store(out_ptr + offsets, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


def _launcher(kernel):
    def launch(inputs, config, out):
        x, y = inputs["x"], inputs["y"]
        n = x.numel()
        if n == 0:
            return out
        block = config["BLOCK_SIZE"]
        kernel[(triton.cdiv(n, block),)](x.contiguous(), y.contiguous(), out, n, BLOCK_SIZE=block)
        return out

    return launch


TAIL_BUG_ADD = dataclasses.replace(
    vector_add.SPEC,
    name="tail_bug_add",
    launch=_launcher(_tail_bug_add_kernel),
    sources=(_tail_bug_add_kernel,),
    _hash=[],
)
"""Right for BLOCK_SIZE < 2048; for larger blocks, wrong whenever the last block is partial."""

INPUT_BUG_THRESHOLD = 2.0
INPUT_BUG_ADD = dataclasses.replace(
    vector_add.SPEC,
    name="input_bug_add",
    launch=_launcher(_input_bug_add_kernel),
    sources=(_input_bug_add_kernel,),
    _hash=[],
)
"""Right for BLOCK_SIZE < 2048; for larger blocks, wrong only on inputs whose first element is above
INPUT_BUG_THRESHOLD (a few seeds in a hundred): a failure that one seed finds and the next may not."""

STATIC_FAIL_ADD = dataclasses.replace(
    vector_add.SPEC,
    name="static_fail_add",
    launch=_launcher(_static_fail_add_kernel),
    sources=(_static_fail_add_kernel,),
    _hash=[],
)
"""Fails to compile with BLOCK_SIZE=256; right otherwise."""


def _baseline_blind_to_empty(inputs):
    x, y = inputs["x"], inputs["y"]
    return None if x.numel() == 0 else x + y


EMPTY_BLIND_ADD = dataclasses.replace(
    vector_add.SPEC, name="empty_blind_add", baseline=_baseline_blind_to_empty, _hash=[]
)
"""vector_add whose baseline returns nothing for an empty problem, as a torch call under a spec's baseline
did for flash_attn on the H100 (TypeError: 'NoneType' object is not iterable, deep inside verify): a broken
gate, not a wrong config."""


def tail_bug_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y (1-D) with the config the runtime looks up for TAIL_BUG_ADD, as a shipped kernel's function does."""
    n = x.numel()
    config = runtime.tuned(TAIL_BUG_ADD).lookup(
        x.dtype, n, lambda: TAIL_BUG_ADD.bucket({"shape": [n]}), lambda: {"shape": [n]}
    )
    runtime.note_launch(TAIL_BUG_ADD.name, config)
    return TAIL_BUG_ADD.launch({"x": x, "y": y}, config, torch.empty_like(x))
