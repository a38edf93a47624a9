"""The layer_norm / rms_norm backward's "tiles_early" kernel: the tiles kernel (`layer_norm_backward_tiles`) for
one-block rows read once (READS=1) with a fused residual, issuing the load of the sum's gradient dh together with
the row's dy and x, before the row sums, where the tiles kernel loads it after them, just before dx's store.

The row sums reduce across the program's warps (through shared memory and barriers), which a load issued after
them cannot overlap: each of a program's rows then waits a memory latency for dh alone. On the H100 (bf16
8192x4096, the tiles kernel's best config each) that was 0.0868 ms without a residual and 0.1467 ms with one: the
residual's one extra read of the data cost as much as 1.1 TB/s would, a third of the memory's rate. Here dh is in
flight while the sums run, held in registers until dx adds it (a tile of BLOCK_N / threads elements a thread).

The arithmetic, its order and the parameter gradients' sums are the tiles kernel's: dx is bit-for-bit its dx.
"""

from __future__ import annotations

import triton
import triton.language as tl

from autotune.kernels.norm.backward_math import _centered_wdy, _dx, _row_rstd
from autotune.kernels.norm.layer_norm_backward_tiles import _centered64, _dw_term64, _load_acc, _store_dx_acc


@triton.jit
def _norm_backward_tiles_early_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, dh_ptr, dx_ptr, dw_ptr, db_ptr,
    n_rows, n_cols, dy_stride, x_stride, dh_stride, dx_stride, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, ATOMIC: tl.constexpr,
    ACC: tl.constexpr, FINE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
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
    w_row = _load_acc(w_ptr, cols, col_ok, ACC, "evict_last")[None, :] if HAS_WEIGHT else 1.0
    r = tl.arange(0, BLOCK_M)
    for first in range(pid.to(tl.int64) * BLOCK_M, n_rows, n_programs * BLOCK_M):  # int64: row * stride can pass 2**31
        rows = first + r
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        # Every load of the rows first: dh's latency overlaps the sums below.
        dy = _load_acc(dy_ptr, rows[:, None] * dy_stride + cols[None, :], mask, ACC, "evict_first")
        x = _load_acc(x_ptr, rows[:, None] * x_stride + cols[None, :], mask, ACC, "evict_first")
        dh = _load_acc(dh_ptr, rows[:, None] * dh_stride + cols[None, :], mask, ACC, "evict_first")
        hi = 0.0 if IS_RMS else tl.load(mean_ptr + rows, mask=row_ok, other=0.0).to(ACC)[:, None]
        lo = 0.0 if IS_RMS else tl.load(mean_ptr + n_rows + rows, mask=row_ok, other=0.0).to(ACC)[:, None]
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
        dx = _dx(xhat, wdy, rstd, tl.sum(xhat * wdy, axis=1)[:, None], sum_wdy, n_cols, IS_RMS) + dh
        _store_dx_acc(dx, dh_ptr, dx_ptr, 0, rows[:, None] * dx_stride + cols[None, :], mask, ACC, False)
        if FINE:
            dw_acc += tl.sum(_dw_term64(x, dy, hi, lo, rstd64, IS_RMS), axis=0)
            db_acc += tl.sum(dy.to(tl.float64), axis=0)
        else:
            dw_acc += tl.sum(dy * xhat, axis=0)
            db_acc += tl.sum(dy, axis=0)
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


SOURCES = (_norm_backward_tiles_early_kernel,)
"""What the tiles_early kernel adds to the backward specs' sources (the tiles kernel's helpers are theirs)."""
