"""The per-row math of the layer_norm / rms_norm backward kernels (`layer_norm_backward`'s one row at a time in
float64, `layer_norm_backward_tiles`'s BLOCK_M rows at a time in the data's accumulator): the centred input, rstd
recomputed from the row, dx. Written for float64 first, hence the docstrings; dtype-generic, they compute in the
dtype of what they are given."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _centered_wdy(x, dy, w, hi, lo, mask, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr):
    """x less the row mean hi + lo (rms_norm: x itself; 0 in masked lanes) and the gradient reaching the
    normalized input through the weight."""
    xc = x if IS_RMS else tl.where(mask, (x - hi) - lo, 0.0)  # masked lanes load x = 0
    wdy = dy * w if HAS_WEIGHT else dy
    return xc, wdy


@triton.jit
def _row_rstd(sum_squares, n_cols, eps):
    """1 / sqrt(variance + eps) in float64, from the row's centered sum of squares. Not the forward's
    float32 rstd: that is off by up to an ulp, and where eps is tiny next to the variance of a short row
    (one or two elements) dx is the difference of two terms that agree to within eps."""
    return 1.0 / tl.sqrt(sum_squares / n_cols + eps)


@triton.jit
def _dx(xhat, wdy, rstd, sum_xhat_wdy, sum_wdy, n_cols, IS_RMS: tl.constexpr):
    """dx = rstd * (wdy - xhat * mean(xhat * wdy) - mean(wdy)); rms_norm has no mean(wdy) term."""
    if IS_RMS:
        return (wdy - xhat * (sum_xhat_wdy / n_cols)) * rstd
    return (wdy - (xhat * (sum_xhat_wdy / n_cols) + sum_wdy / n_cols)) * rstd
