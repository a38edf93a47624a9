"""Casting float32 results to their storage dtype the way a GPU does, also under the Triton interpreter."""

from __future__ import annotations

import triton
import triton.language as tl

from autotune import gpu

INTERPRETING = tl.constexpr(gpu.interpreter_active())


@triton.jit
def round_to(x, dtype: tl.constexpr):
    """float32 x in dtype, rounded to nearest even.

    The Triton interpreter truncates float32 to bfloat16 where a GPU rounds: a row whose values sit near
    rounding boundaries (x + residual around a large offset) then normalizes to something else entirely.
    Under the interpreter the bits are rounded first, so the truncation is exact; compiled, this is the
    plain cast.
    """
    if INTERPRETING and dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        x = tl.where(x != x, x, bits.to(tl.float32, bitcast=True))  # NaN bits must not carry into others
    return x.to(dtype)
