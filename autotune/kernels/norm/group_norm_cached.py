"""group_norm's forward "cached" kernel (variant="cached" in its space): the two-pass kernel ("looped") with its
statistics pass asking L2 to keep the group (evict_last) and its normalize pass to drop it once read
(evict_first): where the groups in flight fit L2, the second read costs no memory traffic and x is read from
memory once. For groups too large for one program's registers ("single") that still fit their share of L2
(the space's MAX_CACHED_GROUP). It computes exactly what looped computes: the same tiles in the same order.
"""

from __future__ import annotations

import triton
import triton.language as tl

from autotune.kernels.norm.group_moments import STAT, _chan_combine, _finish, _tile_moments
from autotune.kernels.norm.group_norm_common import activate, affine


@triton.jit
def _evicting_group_moments(
    x_ptr, pivot, cg, hw, x_sc, x_ss, ACC: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
    EVICT: tl.constexpr,
):
    """Count, mean and sum of squared deviations (in STAT) of x - pivot over channels [0, cg) x positions
    [0, hw), a tile at a time in ACC, combined with Chan's update; the loads with L2 eviction policy EVICT."""
    c = tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_HW)
    seen = tl.cast(0.0, STAT)
    mean = tl.cast(0.0, STAT)
    m2 = tl.cast(0.0, STAT)
    shift = pivot.to(ACC)
    for c0 in range(0, cg, BLOCK_C):
        c_mask = (c0 + c) < cg
        for s0 in range(0, hw, BLOCK_HW):
            mask = c_mask[:, None] & ((s0 + s) < hw)[None, :]
            x = tl.load(x_ptr + (c0 + c)[:, None] * x_sc + (s0 + s)[None, :] * x_ss, mask=mask, other=0.0,
                        eviction_policy=EVICT).to(ACC)
            tile_count = (tl.minimum(cg - c0, BLOCK_C) * tl.minimum(hw - s0, BLOCK_HW)).to(STAT)
            tile_mean, tile_m2 = _tile_moments(tl.where(mask, x - shift, 0.0), mask, tile_count)
            seen, mean, m2 = _chan_combine(seen, mean, m2, tile_count, tile_mean, tile_m2)
    return seen, mean, m2


@triton.jit
def _evicting_normalize(
    x_ptr, y_ptr, w_ptr, b_ptr, first_channel, cg, hw, mean, rstd,
    x_sc, x_ss, y_sc, y_ss, HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, ACC: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr, EVICT: tl.constexpr,
):
    """y = activation(affine((x - mean) * rstd)) over channels [0, cg) x positions [0, hw); the loads of x
    with L2 eviction policy EVICT."""
    c = tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_HW)
    for c0 in range(0, cg, BLOCK_C):
        c_mask = (c0 + c) < cg
        for s0 in range(0, hw, BLOCK_HW):
            mask = c_mask[:, None] & ((s0 + s) < hw)[None, :]
            x = tl.load(x_ptr + (c0 + c)[:, None] * x_sc + (s0 + s)[None, :] * x_ss, mask=mask, other=0.0,
                        eviction_policy=EVICT).to(ACC)
            z = affine((x - mean) * rstd, w_ptr, b_ptr, first_channel + c0 + c, c_mask, HAS_W, HAS_B)
            y = activate(z, ACTIVATION).to(y_ptr.dtype.element_ty)
            tl.store(y_ptr + (c0 + c)[:, None] * y_sc + (s0 + s)[None, :] * y_ss, y, mask=mask)


@triton.jit
def _group_norm_cached_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
    groups, cg, hw, eps,
    x_sn, x_sc, x_ss, y_sn, y_sc, y_ss,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, ACC: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """One (sample, group) per program in tiles: a statistics pass that keeps the group in L2, then a
    normalize pass that reads it from there and lets it go."""
    row = tl.program_id(0)
    n, first_channel = row // groups, (row % groups) * cg
    x_group = x_ptr + n.to(tl.int64) * x_sn + first_channel.to(tl.int64) * x_sc
    y_group = y_ptr + n.to(tl.int64) * y_sn + first_channel.to(tl.int64) * y_sc
    pivot = tl.load(x_group).to(STAT)
    count, mean_d, m2 = _evicting_group_moments(x_group, pivot, cg, hw, x_sc, x_ss, ACC, BLOCK_C, BLOCK_HW,
                                                "evict_last")
    mean, rstd = _finish(pivot, mean_d, m2, count, eps)
    _evicting_normalize(x_group, y_group, w_ptr, b_ptr, first_channel, cg, hw, mean.to(ACC), rstd.to(ACC),
                        x_sc, x_ss, y_sc, y_ss, HAS_W, HAS_B, ACTIVATION, ACC, BLOCK_C, BLOCK_HW, "evict_first")
    tl.store(mean_ptr + row, mean.to(tl.float64))
    tl.store(rstd_ptr + row, rstd.to(tl.float32))


SOURCES = (_evicting_group_moments, _evicting_normalize, _group_norm_cached_kernel)
"""What the cached kernel adds to group_norm's sources."""
