"""group_norm's forward "onepass" kernel (variant="onepass" in its space): one (sample, group) per program, held
whole in registers like "single", but kept in its own dtype and gone over once for its statistics: the sums of the
deviations from a pivot and of their squares are taken together, in float64, as each element is converted, so no
float32 copy of the group lives across the reduction. The output converts the elements again, after the statistics
(`_after`: the compiler cannot reuse the first conversion, which would keep that copy alive), and its addresses
likewise, then applies the affine as one multiply-add per element from per-channel scales. Compiled for sm_90a
(2026-11-27, a 65536-element bf16 group) it spills 24 bytes a thread at 16 warps and 92 at 32, where "single"
spills 2460 and 712."""

from __future__ import annotations

import triton
import triton.language as tl

from autotune.kernels.norm.group_moments import STAT, _finish
from autotune.kernels.norm.group_norm_common import activate


@triton.jit
def _add_pairs(a1, a2, b1, b2):
    return a1 + b1, a2 + b2


@triton.jit
def _after(x, statistic):
    """x unchanged, but computed from statistic (x + 0 * statistic): what is derived from it comes after."""
    return x + (statistic * 0.0).to(x.dtype)


@triton.jit
def _group_norm_onepass_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
    groups, cg, hw, eps,
    x_sn, x_sc, x_ss, y_sn, y_sc, y_ss,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, ACC: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """One (sample, group) per program, held whole in registers in its own dtype: one read, one write."""
    row = tl.program_id(0)
    n, first_channel = row // groups, (row % groups) * cg
    x_group = x_ptr + n.to(tl.int64) * x_sn + first_channel.to(tl.int64) * x_sc
    c = tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_HW)
    c_mask = c < cg
    mask = c_mask[:, None] & (s < hw)[None, :]
    pivot = tl.load(x_group).to(STAT)
    x = tl.load(x_group + c[:, None] * x_sc + s[None, :] * x_ss, mask=mask, other=0.0)
    d = tl.where(mask, x.to(STAT) - pivot, 0.0)
    row_sums, row_squares = tl.reduce((d, d * d), 1, _add_pairs)
    total, squares = tl.reduce((row_sums, row_squares), 0, _add_pairs)
    count = tl.cast(cg * hw, STAT)
    mean_d = total / count
    mean, rstd = _finish(pivot, mean_d, tl.maximum(squares - total * mean_d, 0.0), count, eps)
    scale = tl.full((BLOCK_C,), 1.0, ACC) * rstd.to(ACC)
    if HAS_W:
        scale = scale * tl.load(w_ptr + first_channel + c, mask=c_mask, other=1.0).to(ACC)
    z = (_after(x, mean).to(ACC) - mean.to(ACC)) * scale[:, None]
    if HAS_B:
        z = z + tl.load(b_ptr + first_channel + c, mask=c_mask, other=0.0).to(ACC)[:, None]
    y = activate(z, ACTIVATION)
    # The output's addresses after the statistics too, not held across them (a NaN mean converts to some integer,
    # which times 0.0 is 0 all the same). Written out, not through _after: a channel stride of 1 (channels-last, or
    # one position a channel) is specialized to a constexpr, which has no dtype.
    y_sc = y_sc + (mean.to(tl.int32) * 0.0).to(tl.int32)
    y_tile = y_ptr + n.to(tl.int64) * y_sn + first_channel.to(tl.int64) * y_sc + c[:, None] * y_sc + s[None, :] * y_ss
    tl.store(y_tile, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean.to(tl.float64))
    tl.store(rstd_ptr + row, rstd.to(tl.float32))


SOURCES = (_add_pairs, _after, _group_norm_onepass_kernel)
"""What the onepass kernel adds to group_norm's sources."""
