"""The rotary embedding kernel, forward and backward in one: with x = (x1, x2), the halves of a head,

    forward:   o1 = x1 * c1 - x2 * s1,   o2 = x2 * c2 + x1 * s2   (x * cos + rotate_half(x) * sin)
    backward:  o1 = x1 * c1 + x2 * s2,   o2 = x2 * c2 - x1 * s1   (g * cos + rotate_half^T(g * sin))

where rotate_half(x) = (-x2, x1) and its transpose is (x2, -x1). One program per (batch, position) row reads that
row's cos and sin once and rotates q's and k's heads with them."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune.kernels.common import launch as launch_
from autotune.kernels.common.grid import cdiv
from autotune.kernels.common.rounding import round_to
from autotune.search_spaces.rope import half_block


@triton.jit
def _store(ptr, offs, x, mask, ACC: tl.constexpr):
    """x in the output's dtype: float64 as it is, else from float32, rounded as a GPU rounds."""
    if ACC == tl.float64:
        tl.store(ptr + offs, x, mask=mask)
    else:
        tl.store(ptr + offs, round_to(x, ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotate_heads(x_ptr, o_ptr, x_row, o_row, x_head_stride, o_head_stride, first, stop, half,
                  c1, c2, a, b, cols, col_ok, ACC: tl.constexpr, BLOCK_H: tl.constexpr):
    """Heads [first, stop) of one row, BLOCK_H at a time: o1 = x1 * c1 + x2 * a, o2 = x2 * c2 + x1 * b."""
    heads = tl.arange(0, BLOCK_H)
    for start in range(first, stop, BLOCK_H):
        h = (start + heads).to(tl.int64)
        mask = (h[:, None] < stop) & col_ok[None, :]
        x_offs = x_row + h[:, None] * x_head_stride + cols[None, :]
        o_offs = o_row + h[:, None] * o_head_stride + cols[None, :]
        x1 = tl.load(x_ptr + x_offs, mask=mask, other=0.0).to(ACC)
        x2 = tl.load(x_ptr + x_offs + half, mask=mask, other=0.0).to(ACC)
        o1 = x1 * c1 + x2 * a
        o2 = x2 * c2 + x1 * b
        _store(o_ptr, o_offs, o1, mask, ACC)
        _store(o_ptr, o_offs + half, o2, mask, ACC)


@triton.jit
def _load_half(ptr, offs, col_ok, ACC: tl.constexpr):
    return tl.load(ptr + offs, mask=col_ok, other=0.0).to(ACC)[None, :]


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr,
    seq, n_q_heads, n_k_heads, half,
    q_sb, q_sh, q_sn, k_sb, k_sh, k_sn, qo_sb, qo_sh, qo_sn, ko_sb, ko_sh, ko_sn, cos_sb, cos_sn, sin_sb, sin_sn,
    BACKWARD: tl.constexpr, SPLIT: tl.constexpr, ACC: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Rotates q's and k's heads at one (batch, position) row: all of them (loop), or, with SPLIT, the tile of
    BLOCK_H heads that program_id(1) names (q's tiles first, then k's). Head dims have unit stride."""
    row = tl.program_id(0)
    b = (row // seq).to(tl.int64)
    n = (row % seq).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < half
    c1 = _load_half(cos_ptr, b * cos_sb + n * cos_sn + cols, col_ok, ACC)
    c2 = _load_half(cos_ptr, b * cos_sb + n * cos_sn + half + cols, col_ok, ACC)
    s1 = _load_half(sin_ptr, b * sin_sb + n * sin_sn + cols, col_ok, ACC)
    s2 = _load_half(sin_ptr, b * sin_sb + n * sin_sn + half + cols, col_ok, ACC)
    if BACKWARD:
        a = s2
        bb = -s1
    else:
        a = -s1
        bb = s2
    q_row, qo_row = b * q_sb + n * q_sn, b * qo_sb + n * qo_sn
    k_row, ko_row = b * k_sb + n * k_sn, b * ko_sb + n * ko_sn
    if SPLIT:
        tile = tl.program_id(1)
        q_tiles = tl.cdiv(n_q_heads, BLOCK_H)
        if tile < q_tiles:
            first = tile * BLOCK_H
            _rotate_heads(q_ptr, qo_ptr, q_row, qo_row, q_sh, qo_sh, first, tl.minimum(first + BLOCK_H, n_q_heads),
                          half, c1, c2, a, bb, cols, col_ok, ACC, BLOCK_H)
        else:
            first = (tile - q_tiles) * BLOCK_H
            _rotate_heads(k_ptr, ko_ptr, k_row, ko_row, k_sh, ko_sh, first, tl.minimum(first + BLOCK_H, n_k_heads),
                          half, c1, c2, a, bb, cols, col_ok, ACC, BLOCK_H)
    else:
        _rotate_heads(q_ptr, qo_ptr, q_row, qo_row, q_sh, qo_sh, 0, n_q_heads, half, c1, c2, a, bb, cols, col_ok,
                      ACC, BLOCK_H)
        _rotate_heads(k_ptr, ko_ptr, k_row, ko_row, k_sh, ko_sh, 0, n_k_heads, half, c1, c2, a, bb, cols, col_ok,
                      ACC, BLOCK_H)


SOURCES = (round_to, _store, _rotate_heads, _load_half, _rope_kernel)


def _unit_stride(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()


def launch(q, k, cos, sin, q_out, k_out, config: dict, *, backward: bool, table=None) -> None:
    """Rotate q (B, H, N, D) and k (B, Hk, N, D) into q_out and k_out (same shapes, any strides with a unit-stride
    head dim) by cos and sin (1 or B, N, D) with one config; backward: the transposed rotation (dq, dk from the
    outputs' gradients). Inputs whose head dim is not unit-stride are copied. table: a public call's runtime
    table, whose kept launch binds once (`launch.kept`)."""
    batch, heads, seq, head_dim = q.shape
    kv_heads = k.shape[1]
    if batch * seq == 0 or heads + kv_heads == 0 or head_dim == 0:
        return
    q, k, cos, sin = (_unit_stride(t) for t in (q, k, cos, sin))
    block_h = config["BLOCK_H"]
    split = config["variant"] == "split"
    grid = (batch * seq, cdiv(heads, block_h) + cdiv(kv_heads, block_h)) if split else (batch * seq,)
    launch_.kept(table, _rope_kernel, grid)(
        q, k, cos, sin, q_out, k_out, seq, heads, kv_heads, head_dim // 2,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        q_out.stride(0), q_out.stride(1), q_out.stride(2), k_out.stride(0), k_out.stride(1), k_out.stride(2),
        cos.stride(0) if cos.shape[0] > 1 else 0, cos.stride(1), sin.stride(0) if sin.shape[0] > 1 else 0,
        sin.stride(1),
        BACKWARD=backward, SPLIT=split, ACC=tl.float64 if q.dtype == torch.float64 else tl.float32,
        BLOCK_D=half_block(head_dim), BLOCK_H=block_h, num_warps=config["num_warps"], num_stages=config["num_stages"],
    )


def launch_into(q, k, cos, sin, out, config: dict, *, backward: bool):
    """A spec's launch: out = (q', k') (or (dq, dk)), written where their head dim has unit stride, else through a
    copy of them (so an element the kernel leaves unwritten keeps its value)."""
    q_out, k_out = out
    targets = [t if t.stride(-1) == 1 else t.contiguous() for t in (q_out, k_out)]
    launch(q, k, cos, sin, *targets, config, backward=backward)
    for given, written in zip((q_out, k_out), targets):
        if written is not given:
            given.copy_(written)
    return out
