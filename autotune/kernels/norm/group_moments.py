"""The statistics of a group, shared by group_norm's forward kernels (`group_norm`'s and `group_norm_cached`'s):
the moments of a tile, Chan's update combining two parts, and (mean, rstd) from them."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tile_moments(d, mask, count):
    """Mean and sum of squared deviations (both in STAT) of the count valid elements of tile d (others
    hold 0): the mean's sum in STAT whatever d's dtype, the squared deviations from it in d's."""
    mean = tl.sum(d.to(STAT)) / count
    deviation = tl.where(mask, d - mean.to(d.dtype), 0.0)
    return mean, tl.sum(deviation * deviation).to(STAT)


@triton.jit
def _chan_combine(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    """Chan et al.'s update: count, mean, sum of squared deviations of two parts taken together."""
    n = n_a + n_b
    share = n_b / tl.maximum(n, 1.0)
    delta = mean_b - mean_a
    return n, mean_a + delta * share, m2_a + m2_b + delta * delta * n_a * share


# Statistics are reduced from d = x - pivot, pivot being the group's first element: a large common
# offset costs them no precision, and a constant group has d == 0, so its mean is exactly the constant
# and its variance exactly 0. d and its squared deviations are computed in ACC (float32 for 16-bit data),
# the sums that give the mean in float64 (STAT) whatever the data: the saved mean is float64, and for a
# group of zero-mean data spread by 1, float32 sums of d left it off by a few 1e-8, ten times PyTorch's
# error on an H100 (the gate failed it there, 2026-11-24). Squared deviations from the tile's mean are
# centred, so float32 sums of them keep the variance to a few float32 ulps. Tiles combine in STAT. The
# normalize step computes in ACC (see `accumulator`).
STAT = tl.constexpr(tl.float64)


@triton.jit
def _finish(pivot, mean_d, m2, count, eps):
    """(mean, rstd) from the moments of d = x - pivot."""
    return pivot + mean_d, 1.0 / tl.sqrt(m2 / count + eps)
