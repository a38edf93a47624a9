"""The layer_norm / rms_norm backward's "tiles_ahead" kernel: the tiles kernel (`layer_norm_backward_tiles`) for
one-block rows read once (READS=1), with two changes aimed at the time a program's rows wait rather than move:

- the loads of a program's next tile of rows (dy, x, a fused residual's gradient dh, the row means) are issued
  before the current tile's sums, so that their latency runs under the sums' cross-warp reductions (the tiles
  kernel issues them after; tiles_early moves only dh). The next tile waits in registers as loaded, 16-bit values
  two to a register;
- a row's three sums (its centred squares, the weight's gradient terms, their products with the centred row) are
  reduced together, one pass through shared memory and its barriers, where the tiles kernel reduces them one after
  another (and the third only once rstd, from the first, scales it): sum(xhat * wdy) is rstd * sum(xc * wdy) here.

The gradients are the tiles kernel's up to the rounding of that one sum (the float64 gate holds both). With 16-bit
data and float32 parameter gradients (FINE) the squares, rstd and the parameter-gradient terms are float64, as the
tiles kernel has them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from autotune.kernels.norm.backward_math import _centered_wdy, _dx, _row_rstd
from autotune.kernels.norm.layer_norm_backward_tiles import _centered64, _dw_term64, _store_dx_acc


@triton.jit
def _add3(a0, b0, c0, a1, b1, c1):
    return a0 + a1, b0 + b1, c0 + c1


@triton.jit
def _load_raw(ptr, offs, mask):
    return tl.load(ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first")


@triton.jit
def _load_tile(dy_ptr, x_ptr, dh_ptr, mean_ptr, rows, cols, n_rows, n_cols, dy_stride, x_stride, dh_stride,
               ACC: tl.constexpr, IS_RMS: tl.constexpr, HAS_DH: tl.constexpr, BLOCK_M: tl.constexpr):
    """(dy, x, dh, hi, lo) of a tile of rows as stored (zeros past the ends); dh a (1, 1) zero without a residual,
    hi and lo (the row mean's two parts) zeros for rms_norm."""
    row_ok = rows < n_rows
    mask = row_ok[:, None] & (cols < n_cols)[None, :]
    dy = _load_raw(dy_ptr, rows[:, None] * dy_stride + cols[None, :], mask)
    x = _load_raw(x_ptr, rows[:, None] * x_stride + cols[None, :], mask)
    if HAS_DH:
        dh = _load_raw(dh_ptr, rows[:, None] * dh_stride + cols[None, :], mask)
    else:
        dh = tl.zeros((1, 1), ACC)
    if IS_RMS:
        hi = tl.zeros((BLOCK_M, 1), ACC)
        lo = tl.zeros((BLOCK_M, 1), ACC)
    else:
        hi = tl.load(mean_ptr + rows, mask=row_ok, other=0.0).to(ACC)[:, None]
        lo = tl.load(mean_ptr + n_rows + rows, mask=row_ok, other=0.0).to(ACC)[:, None]
    return dy, x, dh, hi, lo


@triton.jit
def _norm_backward_tiles_ahead_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, dh_ptr, dx_ptr, dw_ptr, db_ptr,
    n_rows, n_cols, dy_stride, x_stride, dh_stride, dx_stride, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_DH: tl.constexpr,
    ATOMIC: tl.constexpr, ACC: tl.constexpr, FINE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program p handles the tiles of BLOCK_M rows p, p + P, ...; each row fits BLOCK_N. dw_ptr/db_ptr as the
    tiles kernel's (a partial row per program at p * n_cols, or one row every program adds into, with ATOMIC)."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if FINE:
        dw_acc = tl.zeros((BLOCK_N,), tl.float64)
        db_acc = tl.zeros((BLOCK_N,), tl.float64)
    else:
        dw_acc = tl.zeros((BLOCK_N,), ACC)
        db_acc = tl.zeros((BLOCK_N,), ACC)
    w_row = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32).to(ACC)[None, :] if HAS_WEIGHT else 1.0
    r = tl.arange(0, BLOCK_M)
    step = n_programs * BLOCK_M
    start = pid.to(tl.int64) * BLOCK_M  # int64: row * stride can pass 2**31
    dy_raw, x_raw, dh_raw, hi, lo = _load_tile(dy_ptr, x_ptr, dh_ptr, mean_ptr, start + r, cols, n_rows, n_cols,
                                               dy_stride, x_stride, dh_stride, ACC, IS_RMS, HAS_DH, BLOCK_M)
    for first in range(start, n_rows, step):
        rows = first + r
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        # The next tile's loads go out now: they land while this tile's sums reduce.
        dy_next, x_next, dh_next, hi_next, lo_next = _load_tile(
            dy_ptr, x_ptr, dh_ptr, mean_ptr, rows + step, cols, n_rows, n_cols, dy_stride, x_stride, dh_stride,
            ACC, IS_RMS, HAS_DH, BLOCK_M)
        dy = dy_raw.to(tl.float32).to(ACC)
        x = x_raw.to(tl.float32).to(ACC)
        xc, wdy = _centered_wdy(x, dy, w_row, hi, lo, mask, IS_RMS, HAS_WEIGHT)
        # One reduction of the row's three sums. Row slots past the last row get rstd 0, not 1 / sqrt(eps): their
        # zeros must add nothing (eps may be 0).
        if FINE:
            xc64 = _centered64(x, hi, lo, mask, IS_RMS)
            squares, sum_wdy, sum_xc_wdy = tl.reduce((xc64 * xc64, wdy, xc * wdy), 1, _add3)
            rstd64 = tl.where(row_ok, _row_rstd(squares, n_cols, eps), 0.0)[:, None]
            rstd = rstd64.to(ACC)
        else:
            squares, sum_wdy, sum_xc_wdy = tl.reduce((xc * xc, wdy, xc * wdy), 1, _add3)
            rstd = tl.where(row_ok, _row_rstd(squares, n_cols, eps), 0.0)[:, None]
        xhat = xc * rstd
        dx = _dx(xhat, wdy, rstd, rstd * sum_xc_wdy[:, None], sum_wdy[:, None], n_cols, IS_RMS)
        if HAS_DH:
            dx += dh_raw.to(tl.float32).to(ACC)
        _store_dx_acc(dx, dh_ptr, dx_ptr, 0, rows[:, None] * dx_stride + cols[None, :], mask, ACC, False)
        if FINE:
            dw_acc += tl.sum(_dw_term64(x, dy, hi, lo, rstd64, IS_RMS), axis=0)
            db_acc += tl.sum(dy.to(tl.float64), axis=0)
        else:
            dw_acc += tl.sum(dy * xhat, axis=0)
            db_acc += tl.sum(dy, axis=0)
        dy_raw, x_raw, dh_raw, hi, lo = dy_next, x_next, dh_next, hi_next, lo_next
    if ATOMIC:
        if HAS_WEIGHT:
            tl.atomic_add(dw_ptr + cols, dw_acc, mask=col_ok, sem="relaxed")
        if HAS_BIAS:
            tl.atomic_add(db_ptr + cols, db_acc, mask=col_ok, sem="relaxed")
    else:
        part = pid.to(tl.int64) * n_cols
        if HAS_WEIGHT:
            tl.store(dw_ptr + part + cols, dw_acc, mask=col_ok)
        if HAS_BIAS:
            tl.store(db_ptr + part + cols, db_acc, mask=col_ok)


SOURCES = (_add3, _load_raw, _load_tile, _norm_backward_tiles_ahead_kernel)
"""What the tiles_ahead kernel adds to the backward specs' sources (the tiles kernel's helpers are theirs)."""
