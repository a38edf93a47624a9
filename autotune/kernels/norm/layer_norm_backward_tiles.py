"""The layer_norm / rms_norm backward's "tiles" kernel (kernel="tiles" in its space): the same gradients as
`layer_norm_backward`'s first kernel ("rows64"), with three changes that kernel cannot take without orphaning
the rows tuned for it:

- the arithmetic and the partial rows are in the data's accumulator (`accumulator`): float64 for float32 data,
  float32 for 16-bit data, whose own resolution is 2**13 times coarser than float32's. Except where a parameter's
  gradient is stored in float32 (float32 parameters on 16-bit data, `fine`): its column sums over rows cancel
  to far below their terms, and the gate judges them at float32's resolution, so there each row's sum of squares,
  rstd and terms of the gradients are float64 (from exact conversions of the float32 tiles), as are its partial
  rows. In float32 a GPU's approximate division and square root and the row sum's rounding leave rstd a few
  ulps off, the same for a whole row, and each term rounds: at the cancelling columns of (3, 4096) rows at 1e4
  that was 6-8x torch's float32 error on the H100. dx stays float32 (stored in 16 bits);
- a row that fits one block and is read once (READS=1) is read BLOCK_M rows at a time: their tiles stay in
  registers across the row sums, more loads in flight for short rows;
- a row read twice (READS=2) asks L2 to keep its first pass for the second (evict_last), and the last reads
  of x, dy and dh ask to go first (evict_first); the weight, read by every program, asks to stay.

ptxas for sm_90a with the GPU's Triton 3.6 (bf16 data, tests/hopper_norm_backward_compile.py): no spills at 8192
columns and 16 warps read once (128 registers), where the float64 kernel spilled 1156 B a thread; two rows of 8192
at once spill, which the space rejects (at most 16 elements a thread). With float32 parameters (float64 gradient
sums) one row of 8192 read once spills (4-8 B a thread for rms_norm, 330-540 B for layer_norm's two float64 sums).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune.kernels.common.rounding import round_to
from autotune.kernels.norm.backward_math import _centered_wdy, _dx, _row_rstd


@triton.jit
def _load_acc(ptr, offs, mask, ACC: tl.constexpr, EVICT: tl.constexpr):
    # EVICT has no default: Triton 3.6 fails to compile a call that leaves a string constexpr to its default.
    return tl.load(ptr + offs, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32).to(ACC)


@triton.jit
def _store_dx_acc(dx, dh_ptr, dx_ptr, dh_offs, dx_offs, mask, ACC: tl.constexpr, HAS_DH: tl.constexpr):
    if HAS_DH:
        dx += _load_acc(dh_ptr, dh_offs, mask, ACC, "evict_first")
    # Through float32: the Triton interpreter casts float64 to bfloat16 wrongly.
    tl.store(dx_ptr + dx_offs, round_to(dx.to(tl.float32), dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _centered64(x, hi, lo, mask, IS_RMS: tl.constexpr):
    """x less the row mean hi + lo in float64 (rms_norm: x itself), from float32 x, hi and lo: exact for 16-bit
    data, where the float32 difference rounds."""
    return x.to(tl.float64) if IS_RMS else tl.where(mask, (x.to(tl.float64) - hi.to(tl.float64)) - lo.to(tl.float64), 0.0)


@triton.jit
def _dw_term64(x, dy, hi, lo, rstd64, IS_RMS: tl.constexpr):
    """dy * xhat in float64 from float32 x and dy (16-bit values) and the float64 rstd: all but exact. Apart from
    `_centered64`'s form, so that the compiler does not keep the row's float64 tile live across the row sums."""
    if IS_RMS:
        return (dy * x).to(tl.float64) * rstd64  # a product of two 16-bit values is exact in float32
    return dy.to(tl.float64) * (x.to(tl.float64) - (hi.to(tl.float64) + lo.to(tl.float64))) * rstd64  # masked: dy = 0


@triton.jit
def _norm_backward_tiles_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, dh_ptr, dx_ptr, dw_ptr, db_ptr,
    n_rows, n_cols, dy_stride, x_stride, dh_stride, dx_stride, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_DH: tl.constexpr,
    ATOMIC: tl.constexpr, ONE_CHUNK: tl.constexpr, ONE_READ: tl.constexpr, ACC: tl.constexpr,
    FINE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program p handles rows p, p + P, ... (READS=1: tiles of BLOCK_M rows p, p + P, ... of them).
    dw_ptr/db_ptr: this program's partial row at p * n_cols (partials), or one row every program adds into
    (atomic), in ACC, or with FINE (float32 ACC, float32 parameter gradients) in float64, as are each row's
    sum of squares, rstd and its terms of those gradients."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    part = 0 if ATOMIC else pid.to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK_N)
    # Where the row fits one block, the parameter gradients stay in registers across all of the program's
    # rows (otherwise they go to memory chunk by chunk; partial rows start zeroed).
    if FINE:
        dw_acc = tl.zeros((BLOCK_N,), tl.float64)
        db_acc = tl.zeros((BLOCK_N,), tl.float64)
    else:
        dw_acc = tl.zeros((BLOCK_N,), ACC)
        db_acc = tl.zeros((BLOCK_N,), ACC)
    if ONE_READ:
        # One read of BLOCK_M one-chunk rows: their tiles (and the weight's) stay live across the row sums.
        col_ok = cols < n_cols
        w_row = _load_acc(w_ptr, cols, col_ok, ACC, "evict_last")[None, :] if HAS_WEIGHT else 1.0
        r = tl.arange(0, BLOCK_M)
        for first in range(pid.to(tl.int64) * BLOCK_M, n_rows, n_programs * BLOCK_M):  # int64: row * stride can pass 2**31
            rows = first + r
            row_ok = rows < n_rows
            mask = row_ok[:, None] & col_ok[None, :]
            hi = 0.0 if IS_RMS else tl.load(mean_ptr + rows, mask=row_ok, other=0.0).to(ACC)[:, None]
            lo = 0.0 if IS_RMS else tl.load(mean_ptr + n_rows + rows, mask=row_ok, other=0.0).to(ACC)[:, None]
            dy = _load_acc(dy_ptr, rows[:, None] * dy_stride + cols[None, :], mask, ACC, "evict_first")
            x = _load_acc(x_ptr, rows[:, None] * x_stride + cols[None, :], mask, ACC, "evict_first")
            xc, wdy = _centered_wdy(x, dy, w_row, hi, lo, mask, IS_RMS, HAS_WEIGHT)
            # Row slots past the last row get rstd 0, not 1 / sqrt(eps): their zeros must add nothing (eps may be 0).
            if FINE:
                xc64 = _centered64(x, hi, lo, mask, IS_RMS)
                rstd64 = tl.where(row_ok, _row_rstd(tl.sum(xc64 * xc64, axis=1), n_cols, eps), 0.0)[:, None]
                rstd = rstd64.to(ACC)
            else:
                rstd = tl.where(row_ok, _row_rstd(tl.sum(xc * xc, axis=1), n_cols, eps), 0.0)[:, None]
            xhat = xc * rstd
            sum_wdy = 0.0 if IS_RMS else tl.sum(wdy, axis=1)[:, None]
            dx = _dx(xhat, wdy, rstd, tl.sum(xhat * wdy, axis=1)[:, None], sum_wdy, n_cols, IS_RMS)
            _store_dx_acc(dx, dh_ptr, dx_ptr, rows[:, None] * dh_stride + cols[None, :],
                          rows[:, None] * dx_stride + cols[None, :], mask, ACC, HAS_DH)
            if FINE:
                dw_acc += tl.sum(_dw_term64(x, dy, hi, lo, rstd64, IS_RMS), axis=0)
                db_acc += tl.sum(dy.to(tl.float64), axis=0)
            else:
                dw_acc += tl.sum(dy * xhat, axis=0)
                db_acc += tl.sum(dy, axis=0)
    else:
        for row in range(pid.to(tl.int64), n_rows, n_programs):  # int64: row * stride can pass 2**31
            hi = 0.0 if IS_RMS else tl.load(mean_ptr + row).to(ACC)
            lo = 0.0 if IS_RMS else tl.load(mean_ptr + n_rows + row).to(ACC)
            # Two reads of the row: one for its sums, reduced to scalars as they go, one for dx and the
            # gradients. The second is meant to hit L2 (the first asks to keep the row there).
            sum_xc_wdy = tl.full((), 0.0, ACC)
            sum_wdy = tl.full((), 0.0, ACC)
            if FINE:
                sum_squares = tl.full((), 0.0, tl.float64)
            else:
                sum_squares = tl.full((), 0.0, ACC)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_ok = c < n_cols
                w = _load_acc(w_ptr, c, col_ok, ACC, "evict_last") if HAS_WEIGHT else 1.0
                x = _load_acc(x_ptr, row * x_stride + c, col_ok, ACC, "evict_last")
                xc, wdy = _centered_wdy(x, _load_acc(dy_ptr, row * dy_stride + c, col_ok, ACC, "evict_last"),
                                        w, hi, lo, col_ok, IS_RMS, HAS_WEIGHT)
                sum_xc_wdy += tl.sum(xc * wdy, axis=0)
                sum_wdy += tl.sum(wdy, axis=0)
                if FINE:
                    xc64 = _centered64(x, hi, lo, col_ok, IS_RMS)
                    sum_squares += tl.sum(xc64 * xc64, axis=0)
                else:
                    sum_squares += tl.sum(xc * xc, axis=0)
            if FINE:
                rstd64 = _row_rstd(sum_squares, n_cols, eps)
                rstd = rstd64.to(ACC)
            else:
                rstd = _row_rstd(sum_squares, n_cols, eps)
            total_xhat_wdy = rstd * sum_xc_wdy
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_ok = c < n_cols
                w = _load_acc(w_ptr, c, col_ok, ACC, "evict_last") if HAS_WEIGHT else 1.0
                dy = _load_acc(dy_ptr, row * dy_stride + c, col_ok, ACC, "evict_first")
                x = _load_acc(x_ptr, row * x_stride + c, col_ok, ACC, "evict_first")
                xc, wdy = _centered_wdy(x, dy, w, hi, lo, col_ok, IS_RMS, HAS_WEIGHT)
                xhat = xc * rstd
                dx = _dx(xhat, wdy, rstd, total_xhat_wdy, sum_wdy, n_cols, IS_RMS)
                _store_dx_acc(dx, dh_ptr, dx_ptr, row * dh_stride + c, row * dx_stride + c, col_ok, ACC, HAS_DH)
                # The terms of the parameter gradients: float64 with FINE, else ACC.
                if FINE:
                    dy_term = dy.to(tl.float64)
                    dw_term = _dw_term64(x, dy, hi, lo, rstd64, IS_RMS)
                else:
                    dy_term = dy
                    dw_term = dy * xhat
                if ONE_CHUNK:
                    dw_acc += dw_term
                    db_acc += dy_term
                elif ATOMIC:
                    if HAS_WEIGHT:
                        tl.atomic_add(dw_ptr + c, dw_term, mask=col_ok, sem="relaxed")
                    if HAS_BIAS:
                        tl.atomic_add(db_ptr + c, dy_term, mask=col_ok, sem="relaxed")
                else:
                    # Only this program touches its partial row, and each lane reads what it wrote.
                    if HAS_WEIGHT:
                        tl.store(dw_ptr + part + c, tl.load(dw_ptr + part + c, mask=col_ok) + dw_term, mask=col_ok)
                    if HAS_BIAS:
                        tl.store(db_ptr + part + c, tl.load(db_ptr + part + c, mask=col_ok) + dy_term, mask=col_ok)
    if ONE_CHUNK:
        col_ok = cols < n_cols
        if ATOMIC:
            if HAS_WEIGHT:
                tl.atomic_add(dw_ptr + cols, dw_acc, mask=col_ok, sem="relaxed")
            if HAS_BIAS:
                tl.atomic_add(db_ptr + cols, db_acc, mask=col_ok, sem="relaxed")
        else:
            if HAS_WEIGHT:
                tl.store(dw_ptr + part + cols, dw_acc, mask=col_ok)
            if HAS_BIAS:
                tl.store(db_ptr + part + cols, db_acc, mask=col_ok)


def accumulator(dtype: torch.dtype) -> torch.dtype:
    """The dtype the tiles kernel computes in for data of `dtype` (see the module's docstring)."""
    return torch.float64 if dtype == torch.float32 else torch.float32


def fine(dtype: torch.dtype, grad_dtypes) -> bool:
    """Whether the tiles kernel sums the parameter gradients (and each row's squares) in float64 from data
    of `dtype` it computes on in float32: where a gradient of those is stored in float32 (see the module's docstring)."""
    return accumulator(dtype) == torch.float32 and torch.float32 in grad_dtypes


def partials_dtype(dtype: torch.dtype, grad_dtypes) -> torch.dtype:
    """The dtype of the tiles kernel's partial (or atomic) rows of the parameter gradients."""
    return torch.float64 if fine(dtype, grad_dtypes) else accumulator(dtype)


TL_DTYPES = {torch.float64: tl.float64, torch.float32: tl.float32}

SOURCES = (_load_acc, _store_dx_acc, _centered64, _dw_term64, _norm_backward_tiles_kernel, accumulator, fine, partials_dtype)
"""What the tiles kernel adds to the backward specs' sources."""
