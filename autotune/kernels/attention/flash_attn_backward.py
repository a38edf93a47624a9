"""Backward of flash_attn, as FlashAttention-2 computes it: the probabilities recomputed from q, k and the
saved log-sum-exp, never stored. First delta = rowsum(P * dP) per query; then one program per block of
keys (and key/value head) accumulates dK and dV over every query of its GQA group; dQ comes from a
query-side kernel, one program per block of queries ("separate"), or from atomics in the first ("atomic").

delta is rowsum(dO * O) ("output", FlashAttention's one cheap pass) or rowsum(P * dP) recomputed by the
query-side kernel ("recomputed", two more matmuls per block). They differ where softmax rows saturate
(large logits): there dP - delta is small next to dP, and O rounded to bfloat16 leaves delta an error of
dP's size / 2**9; the recomputed delta has none of it. The search keeps "output" only where it passes the
gate (the torch baseline of the GPU, FlashAttention-like itself, errs the same way; the CPU's does not).

Half inputs multiply on tensor cores (the probabilities and their gradients rounded to the input dtype
first, as FlashAttention does); float32 inputs in float64 (see _attn_tiles). dS rounded to bfloat16 ("ds":
"rounded") fails the gate where one query sees a thousand keys of small logits (Nq = 1, Nk = 1021, inputs
scaled by 0.01: dQ error 0.176 against a budget of 0.112 on the H100, whose sdpa errs 0.026): the dS of a
row sum to 0, their rounding errors do not, and dQ is what is left of that cancellation. "split" adds the
rounding remainder as a second half operand (one more MMA for dQ and one for dK): error 0.0027 there.

P rounded for dV = P^T dO errs where dV's terms cancel (fp16, flash_attn.DV_SPLIT_NEEDED): dv="split" recomputes dV
after either engine's kernels by a pass of its own, P split as dS is (_attn_bwd_dv_split_kernel).

Configs with engine="gluon" run the Gluon backward for Hopper instead (hopper_backward.py; its parameters:
search_spaces/flash_attn_backward_gluon.py), from the same o, natural-log lse (float32 for half inputs) and dO.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune import runtime
from autotune.kernels.attention import hopper_backward as gluon_
from autotune.kernels.attention import hopper_backward_dkdv as gluon_dkdv
from autotune.kernels.attention import hopper_backward_dq as gluon_dq
from autotune.kernels.attention import hopper_forward as gluon_forward
from autotune.kernels.attention import problems as problems_
from autotune.kernels.attention import reference as math_
from autotune.kernels.attention.tiles import (
    LOG2E,
    compute_dtype,
    exp_,
    key_blocks,
    load_rows,
    mma,
    scalar,
    score_multiplier,
    split_float,
    unit_stride,
    upcast,
    widen,
)
from autotune.kernels.common import launch as launch_
from autotune.kernels.common.grid import cdiv
from autotune.kernels.common.rounding import round_to
from autotune.search_spaces import flash_attn_backward_gluon as engines
from autotune.search_spaces.flash_attn import BACKWARD_SPACE, backward_resources, block_d, bucket
from autotune.spec import EarlierSpace, Inputs, KernelSpec

DELTA_ROWS = 32
"""Query rows per program of the delta kernel (memory-bound, not tuned)."""


@triton.jit
def _delta_kernel(o_ptr, do_ptr, delta_ptr, stride_ob, stride_oh, stride_om, stride_db, stride_dh, stride_dm,
                  n_heads, nq, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """delta = rowsum(dO * O) of rows m*BLOCK_M.. of head p, summed in float64, stored in delta's dtype."""
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    start = tl.program_id(0) * BLOCK_M
    offs = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    o = load_rows(o_ptr + b * stride_ob + h * stride_oh, start, offs, stride_om, nq, offs_d, HEAD_DIM, BLOCK_D, True, False)
    do = load_rows(do_ptr + b * stride_db + h * stride_dh, start, offs, stride_dm, nq, offs_d, HEAD_DIM, BLOCK_D, True, False)
    delta = tl.sum(o.to(tl.float32).to(tl.float64) * do.to(tl.float32).to(tl.float64), 1)
    tl.store(delta_ptr + pid_bh.to(tl.int64) * nq + start + offs, delta.to(delta_ptr.dtype.element_ty),
             mask=start + offs < nq)


@triton.jit
def _row_lse(lse_base, rows, row_ok, UPCAST: tl.constexpr):
    """The log-sum-exp of query rows in the units scores take (log2 for half inputs); rows past Nq read 0."""
    lse = tl.load(lse_base + rows, mask=row_ok, other=0.0)
    if UPCAST:
        lse = lse.to(tl.float64)
    else:
        lse = lse * LOG2E
    return lse


@triton.jit
def _row_delta(delta_base, rows, row_ok, UPCAST: tl.constexpr):
    return widen(tl.load(delta_base + rows, mask=row_ok, other=0.0), UPCAST)


@triton.jit
def _dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, start, offs_m, keys, offs_d,
               stride_qm, stride_dom, stride_dqm, nq, nk, scale, mult,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
               ATOMIC_DQ: tl.constexpr, UPCAST: tl.constexpr, SPLIT_DS: tl.constexpr):
    """One block of queries against the held keys, in the transposed orientation (keys are tile rows).
    Queries past Nq load as 0 with log-sum-exp and delta 0: their probabilities are 1 but meet dO = 0 and
    q = 0, so they add nothing."""
    q = widen(load_rows(q_base, start, offs_m, stride_qm, nq, offs_d, HEAD_DIM, BLOCK_D, True, False), UPCAST)
    do = widen(load_rows(do_base, start, offs_m, stride_dom, nq, offs_d, HEAD_DIM, BLOCK_D, True, False), UPCAST)
    rows = start + offs_m
    row_ok = rows < nq
    lse = _row_lse(lse_base, rows, row_ok, UPCAST)
    delta = _row_delta(delta_base, rows, row_ok, UPCAST)
    p_t = exp_(mma(k, tl.trans(q), None) * mult - lse[None, :], UPCAST)
    if MASKED:
        ok = keys[:, None] < nk
        if CAUSAL:
            ok = ok & (keys[:, None] <= rows[None, :])
        p_t = tl.where(ok, p_t, 0.0)
    dv = mma(round_to(p_t, do.dtype), do, dv)
    ds_t = p_t * (mma(v, tl.trans(do), None) - delta[None, :])
    ds_hi = round_to(ds_t, q.dtype)
    dk = mma(ds_hi, q, dk)
    if SPLIT_DS:
        ds_lo = round_to(ds_t - ds_hi.to(ds_t.dtype), q.dtype)
        dk = mma(ds_lo, q, dk)
    if ATOMIC_DQ:
        dq = mma(tl.trans(ds_hi), k, None)
        if SPLIT_DS:
            dq = mma(tl.trans(ds_lo), k, dq)
        dq = dq * scale
        ptrs = dq_base + rows.to(tl.int64)[:, None] * stride_dqm + offs_d[None, :]
        tl.atomic_add(ptrs, dq, mask=row_ok[:, None] & (offs_d[None, :] < HEAD_DIM), sem="relaxed")
    return dk, dv


@triton.jit
def _attn_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn, stride_dqb, stride_dqh, stride_dqm,
    n_heads, n_kv_heads, group, nq, nk, scale_hi, scale_lo, mult_hi, mult_lo,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, ATOMIC_DQ: tl.constexpr, UPCAST: tl.constexpr, SPLIT_DS: tl.constexpr,
):
    """Program (n, p): dK and dV of keys n*BLOCK_N.. of key/value head p, summed over its group's query
    heads; with ATOMIC_DQ also adds each block's dQ into dq (compute dtype). dk and dv share strides."""
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_kv_heads).to(tl.int64)
    kv_head = (pid_bh % n_kv_heads).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    keys = start_n + offs_n
    scale = scalar(scale_hi, scale_lo, UPCAST)
    mult = scalar(mult_hi, mult_lo, UPCAST)
    k = load_rows(k_ptr + b * stride_kb + kv_head * stride_kh, start_n, offs_n, stride_kn, nk, offs_d,
                  HEAD_DIM, BLOCK_D, True, False)
    v = load_rows(v_ptr + b * stride_vb + kv_head * stride_vh, start_n, offs_n, stride_vn, nk, offs_d,
                  HEAD_DIM, BLOCK_D, True, False)
    k = widen(k, UPCAST)
    v = widen(v, UPCAST)
    # Query blocks before q_lo see none of these keys (causal); blocks from q_lo to diag_end see some of
    # them and are masked, as is every block when this key block is ragged.
    q_lo = 0
    diag_end = 0
    if CAUSAL:
        q_lo = start_n // BLOCK_M * BLOCK_M
        diag_end = q_lo + tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - q_lo, 0), BLOCK_M) * BLOCK_M
    diag_end = tl.where(start_n + BLOCK_N > nk, nq, diag_end)
    masked_end = tl.minimum(diag_end, nq)
    dk = widen(tl.zeros([BLOCK_N, BLOCK_D], tl.float32), UPCAST)
    dv = widen(tl.zeros([BLOCK_N, BLOCK_D], tl.float32), UPCAST)
    for g in range(0, group):
        head = (kv_head * group + g).to(tl.int64)
        q_base = q_ptr + b * stride_qb + head * stride_qh
        do_base = do_ptr + b * stride_dob + head * stride_doh
        lse_base = lse_ptr + (b * n_heads + head) * nq
        delta_base = delta_ptr + (b * n_heads + head) * nq
        dq_base = dq_ptr + b * stride_dqb + head * stride_dqh
        for start in range(q_lo, masked_end, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, start, offs_m, keys,
                                offs_d, stride_qm, stride_dom, stride_dqm, nq, nk, scale, mult,
                                HEAD_DIM, BLOCK_D, True, CAUSAL, ATOMIC_DQ, UPCAST, SPLIT_DS)
        for start in range(diag_end, nq, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, start, offs_m, keys,
                                offs_d, stride_qm, stride_dom, stride_dqm, nq, nk, scale, mult,
                                HEAD_DIM, BLOCK_D, False, CAUSAL, ATOMIC_DQ, UPCAST, SPLIT_DS)
    rows = (b * stride_dkb + kv_head * stride_dkh + keys.to(tl.int64) * stride_dkn)[:, None] + offs_d[None, :]
    mask = (keys[:, None] < nk) & (offs_d[None, :] < HEAD_DIM)
    tl.store(dk_ptr + rows, round_to((dk * scale).to(tl.float32), dk_ptr.dtype.element_ty), mask=mask)
    tl.store(dv_ptr + rows, round_to(dv.to(tl.float32), dv_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dv_split_step(dv, k, q_base, do_base, lse_base, start, offs_m, keys, offs_d, stride_qm, stride_dom, nq, nk, mult,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """dV of the held keys plus one block of queries' P^T dO, P split into two half operands (P rounded to dO's
    dtype, then the rounding's remainder rounded), in the transposed orientation as _dkdv_step."""
    q = load_rows(q_base, start, offs_m, stride_qm, nq, offs_d, HEAD_DIM, BLOCK_D, True, False)
    do = load_rows(do_base, start, offs_m, stride_dom, nq, offs_d, HEAD_DIM, BLOCK_D, True, False)
    rows = start + offs_m
    p_t = exp_(mma(k, tl.trans(q), None) * mult - _row_lse(lse_base, rows, rows < nq, False)[None, :], False)
    if MASKED:
        ok = keys[:, None] < nk
        if CAUSAL:
            ok = ok & (keys[:, None] <= rows[None, :])
        p_t = tl.where(ok, p_t, 0.0)
    p_hi = round_to(p_t, do.dtype)
    dv = mma(p_hi, do, dv)
    return mma(round_to(p_t - p_hi.to(tl.float32), do.dtype), do, dv)


@triton.jit
def _attn_bwd_dv_split_kernel(
    q_ptr, k_ptr, do_ptr, lse_ptr, dv_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_dob, stride_doh, stride_dom,
    stride_dvb, stride_dvh, stride_dvn, n_heads, n_kv_heads, group, nq, nk, mult,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    """Program (n, p): dV of keys n*BLOCK_N.. of key/value head p, summed over its group's query heads, with P
    split (half inputs): the pass dv="split" runs after either engine's, overwriting their dV."""
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_kv_heads).to(tl.int64)
    kv_head = (pid_bh % n_kv_heads).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    keys = start_n + offs_n
    k = load_rows(k_ptr + b * stride_kb + kv_head * stride_kh, start_n, offs_n, stride_kn, nk, offs_d,
                  HEAD_DIM, BLOCK_D, True, False)
    # Query blocks as _attn_bwd_dkdv_kernel walks them: none before q_lo (causal), masked to diag_end. Its lines are
    # repeated here, not shared: that kernel's source is what its rows were tuned and verified with (its hash).
    q_lo = 0
    diag_end = 0
    if CAUSAL:
        q_lo = start_n // BLOCK_M * BLOCK_M
        diag_end = q_lo + tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - q_lo, 0), BLOCK_M) * BLOCK_M
    diag_end = tl.where(start_n + BLOCK_N > nk, nq, diag_end)
    masked_end = tl.minimum(diag_end, nq)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    for g in range(0, group):
        head = (kv_head * group + g).to(tl.int64)
        q_base = q_ptr + b * stride_qb + head * stride_qh
        do_base = do_ptr + b * stride_dob + head * stride_doh
        lse_base = lse_ptr + (b * n_heads + head) * nq
        for start in range(q_lo, masked_end, BLOCK_M):
            dv = _dv_split_step(dv, k, q_base, do_base, lse_base, start, offs_m, keys, offs_d, stride_qm, stride_dom,
                                nq, nk, mult, HEAD_DIM, BLOCK_D, True, CAUSAL)
        for start in range(diag_end, nq, BLOCK_M):
            dv = _dv_split_step(dv, k, q_base, do_base, lse_base, start, offs_m, keys, offs_d, stride_qm, stride_dom,
                                nq, nk, mult, HEAD_DIM, BLOCK_D, False, CAUSAL)
    rows = (b * stride_dvb + kv_head * stride_dvh + keys.to(tl.int64) * stride_dvn)[:, None] + offs_d[None, :]
    mask = (keys[:, None] < nk) & (offs_d[None, :] < HEAD_DIM)
    tl.store(dv_ptr + rows, round_to(dv, dv_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _query_step(acc, p_sum, q, do, lse, delta, k_base, v_base, start, rows, offs_n, offs_d, stride_kn, stride_vn, nk,
                mult, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                UPCAST: tl.constexpr, DELTA: tl.constexpr, SPLIT_DS: tl.constexpr):
    """One block of keys against the held queries: adds to dQ, or with DELTA to rowsum(P * dP) and
    rowsum(P)."""
    k = widen(load_rows(k_base, start, offs_n, stride_kn, nk, offs_d, HEAD_DIM, BLOCK_D, MASKED, False), UPCAST)
    v = widen(load_rows(v_base, start, offs_n, stride_vn, nk, offs_d, HEAD_DIM, BLOCK_D, MASKED, False), UPCAST)
    p = exp_(mma(q, tl.trans(k), None) * mult - lse[:, None], UPCAST)
    if MASKED:
        keys = start + offs_n
        ok = keys[None, :] < nk
        if CAUSAL:
            ok = ok & (keys[None, :] <= rows[:, None])
        p = tl.where(ok, p, 0.0)
    dp = mma(do, tl.trans(v), None)
    if DELTA:
        acc += tl.sum(p * dp, 1)
        p_sum += tl.sum(p, 1)
    else:
        ds = p * (dp - delta[:, None])
        ds_hi = round_to(ds, k.dtype)
        acc = mma(ds_hi, k, acc)
        if SPLIT_DS:
            acc = mma(round_to(ds - ds_hi.to(ds.dtype), k.dtype), k, acc)
    return acc, p_sum


@triton.jit
def _attn_bwd_query_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom, stride_dqb, stride_dqh, stride_dqm,
    n_heads, group, nq, nk, scale_hi, scale_lo, mult_hi, mult_lo,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, UPCAST: tl.constexpr, DELTA: tl.constexpr, SPLIT_DS: tl.constexpr,
):
    """Program (m, p): dQ of queries m*BLOCK_M.. of query head p, streaming the keys they see; with DELTA,
    their delta = rowsum(P * dP) / rowsum(P) instead, the probabilities recomputed (into delta, of the
    compute dtype). rowsum(P) is 1 but for rounding: where a large logit's probability comes out 1 + 1e-5,
    dividing by it keeps dP - delta of that key as small as it is (the row's dS still sums to 0)."""
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    head = (pid_bh % n_heads).to(tl.int64)
    kv_head = head // group
    start_m = tl.program_id(0) * BLOCK_M
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    rows = start_m + offs_m
    row_ok = rows < nq
    q = load_rows(q_ptr + b * stride_qb + head * stride_qh, start_m, offs_m, stride_qm, nq, offs_d, HEAD_DIM, BLOCK_D,
                  True, False)
    do = load_rows(do_ptr + b * stride_dob + head * stride_doh, start_m, offs_m, stride_dom, nq, offs_d, HEAD_DIM,
                   BLOCK_D, True, False)
    q = widen(q, UPCAST)
    do = widen(do, UPCAST)
    lse = _row_lse(lse_ptr + pid_bh.to(tl.int64) * nq, rows, row_ok, UPCAST)
    mult = scalar(mult_hi, mult_lo, UPCAST)
    k_base = k_ptr + b * stride_kb + kv_head * stride_kh
    v_base = v_ptr + b * stride_vb + kv_head * stride_vh
    mid, end = key_blocks(0, nk, start_m, start_m + BLOCK_M - 1, BLOCK_N, CAUSAL, True)
    p_sum = widen(tl.zeros([BLOCK_M], tl.float32), UPCAST)
    if DELTA:
        acc = p_sum
        delta = p_sum
    else:
        acc = widen(tl.zeros([BLOCK_M, BLOCK_D], tl.float32), UPCAST)
        delta = _row_delta(delta_ptr + pid_bh.to(tl.int64) * nq, rows, row_ok, UPCAST)
    for start in range(0, mid, BLOCK_N):
        acc, p_sum = _query_step(acc, p_sum, q, do, lse, delta, k_base, v_base, start, rows, offs_n, offs_d, stride_kn,
                                 stride_vn, nk, mult, HEAD_DIM, BLOCK_D, False, CAUSAL, UPCAST, DELTA, SPLIT_DS)
    for start in range(mid, end, BLOCK_N):
        acc, p_sum = _query_step(acc, p_sum, q, do, lse, delta, k_base, v_base, start, rows, offs_n, offs_d, stride_kn,
                                 stride_vn, nk, mult, HEAD_DIM, BLOCK_D, True, CAUSAL, UPCAST, DELTA, SPLIT_DS)
    if DELTA:
        tl.store(delta_ptr + pid_bh.to(tl.int64) * nq + rows, acc / p_sum, mask=row_ok)
    else:
        dq = (acc * scalar(scale_hi, scale_lo, UPCAST)).to(tl.float32)
        dq_rows = b * stride_dqb + head * stride_dqh + rows.to(tl.int64) * stride_dqm
        tl.store(dq_ptr + dq_rows[:, None] + offs_d[None, :], round_to(dq, dq_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & (offs_d[None, :] < HEAD_DIM))


def launch(do, q, k, v, o, lse, dq, dk, dv, causal: bool, scale: float, config: dict, *, checked: bool = False,
           table=None) -> None:
    """Gradients of attention of q (B, Hq, Nq, D) over k, v (B, Hk, Nk, D) into dq, dk, dv (dk and dv of
    one layout), from the output o and its log-sum-exp (B, Hq, Nq, contiguous, of compute_dtype), with one
    config. Unit stride along D is required. `checked`: the caller has asked `gluon_refuses` of this call already.
    table: a public call's runtime table, whose kept launches (either engine's) bind once (`launch.kept`).
    dv="split" recomputes dV by a pass of its own after the engine's kernels (`_split_dv`)."""
    if config.get("engine") == "gluon":
        _launch_gluon(do, q, k, v, o, lse, dq, dk, dv, causal, scale, config, checked, table)
    else:
        _launch_triton(do, q, k, v, o, lse, dq, dk, dv, causal, scale, config, table)
    if config.get("dv") == "split" and not upcast(q.dtype):
        _split_dv(do, q, k, lse, dv, causal, scale, table)


DV_BLOCK_M = 64
"""Queries a step of the dv="split" pass (not tuned: a pass only the accuracy some problems need asks for)."""


def _split_dv(do, q, k, lse, dv, causal: bool, scale: float, table=None) -> None:
    """dv again, P split into two half operands (`_attn_bwd_dv_split_kernel`), where the engines' kernels ran:
    more than one key, and not a causal single query (whose dv launch() sets exactly)."""
    batch, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    if batch * heads * nq == 0 or nk <= 1 or (causal and nq == 1):
        return
    block_n = 64 if block_d(d) <= 128 else 32  # the accumulator of 64 keys by 256 dims would spill
    launch_.kept(table, _attn_bwd_dv_split_kernel, (cdiv(nk, block_n), batch * kv_heads))(
        q, k, do, lse, dv, *q.stride()[:3], *k.stride()[:3], *do.stride()[:3], *dv.stride()[:3],
        heads, kv_heads, heads // kv_heads, nq, nk, score_multiplier(scale, q.dtype)[0],
        HEAD_DIM=d, BLOCK_D=block_d(d), BLOCK_M=DV_BLOCK_M, BLOCK_N=block_n, CAUSAL=causal, num_warps=4, num_stages=2,
    )


def _launch_triton(do, q, k, v, o, lse, dq, dk, dv, causal: bool, scale: float, config: dict, table) -> None:
    batch, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    if batch * heads * nq == 0 or nk == 0:  # no query sees a key: every gradient is 0
        for grad in (dq, dk, dv):
            grad.zero_()
        return
    group = heads // kv_heads
    if nk == 1 or (causal and nq == 1):
        # Every query sees one key: its probability is the constant 1, so dS = 0, dq = dk = 0 exactly and
        # dv of key 0 is dO summed. The kernels would return their rounding noise (1e-7 of dP) for those 0s.
        for grad in (dq, dk, dv):
            grad.zero_()
        dv[:, :, 0] = do.to(torch.float64).unflatten(1, (kv_heads, group)).sum((2, 3)).to(dv.dtype)
        return
    compute = dict(dtype=compute_dtype(q.dtype), device=q.device)
    wide = upcast(q.dtype)  # float64 dS leaves no remainder to split off
    meta = dict(HEAD_DIM=d, BLOCK_D=block_d(d), CAUSAL=causal, UPCAST=wide, SPLIT_DS=config["ds"] == "split" and not wide,
                num_warps=config["num_warps"], num_stages=config["num_stages"])
    common = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3])
    scalars = (*split_float(scale), *score_multiplier(scale, q.dtype))
    # The query-side kernel holds BLOCK_N queries and streams BLOCK_M keys (the dk/dv kernel's roles swapped).
    query_grid = (cdiv(nq, config["BLOCK_N"]), batch * heads)
    query_meta = dict(BLOCK_M=config["BLOCK_N"], BLOCK_N=config["BLOCK_M"], **meta)
    delta = torch.empty((batch, heads, nq), **compute)
    if config["delta"] == "output":
        launch_.kept(table, _delta_kernel, (cdiv(nq, DELTA_ROWS), batch * heads))(
            o, do, delta, *o.stride()[:3], *do.stride()[:3], heads, nq,
            HEAD_DIM=d, BLOCK_D=block_d(d), BLOCK_M=DELTA_ROWS, num_warps=4,
        )
    else:
        launch_.kept(table, _attn_bwd_query_kernel, query_grid, "delta")(
            q, k, v, do, lse, delta, dq, *common, *dq.stride()[:3], heads, group, nq, nk, *scalars, DELTA=True,
            **query_meta,
        )
    atomic = config["dq"] == "atomic"
    dq_acc = torch.zeros(dq.shape, **compute) if atomic else dq  # added into from many programs, from zero
    launch_.kept(table, _attn_bwd_dkdv_kernel, (cdiv(nk, config["BLOCK_N"]), batch * kv_heads))(
        q, k, v, do, lse, delta, dk, dv, dq_acc, *common, *dk.stride()[:3], *dq_acc.stride()[:3],
        heads, kv_heads, group, nq, nk, *scalars,
        BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], ATOMIC_DQ=atomic, **meta,
    )
    if atomic:
        dq.copy_(dq_acc)
        return
    launch_.kept(table, _attn_bwd_query_kernel, query_grid, "dq")(
        q, k, v, do, lse, delta, dq, *common, *dq.stride()[:3], heads, group, nq, nk, *scalars, DELTA=False,
        **query_meta,
    )


def gluon_refuses(do, q, k, v, o, lse, dq, dk, dv, causal: bool, scale: float, config: dict) -> str | None:
    """Why a config with engine="gluon" cannot run this call (hopper_backward.supported: the machine, dtype, head
    dim, a tensor TMA cannot address; a log-sum-exp not (B, Hq, Nq) float32), or None; always None for the Triton
    engine. o and dO it copies where TMA cannot read them."""
    if config.get("engine") != "gluon":
        return None
    if lse.shape != q.shape[:3] or lse.dtype != torch.float32:
        return f"the Gluon kernel reads a (B, Hq, Nq) float32 log-sum-exp, got {tuple(lse.shape)} {lse.dtype}"
    return gluon_.supported(q, k, v, causal, scale, engines.kernel_config(config), grads=(dq, dk, dv))


def _launch_gluon(do, q, k, v, o, lse, dq, dk, dv, causal: bool, scale: float, config: dict, checked: bool,
                  table) -> None:
    if not checked and (reason := gluon_refuses(do, q, k, v, o, lse, dq, dk, dv, causal, scale, config)) is not None:
        raise ValueError(f"flash_attn_backward: engine=gluon cannot run this call: {reason}")
    gluon_.launch(do, q, k, v, o, lse.contiguous(), dq, dk, dv, causal, scale, engines.kernel_config(config), table)


def make_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    """q, k, v and the call's options as the forward takes them; dO (laid out like them), and the output
    and log-sum-exp as the forward saves them (from float64, rounded)."""
    inputs = problems_.forward_inputs(problem, dtype, device, seed)
    q = inputs["q"]
    gen = torch.Generator().manual_seed(seed + 1)
    inputs["do"] = problems_.place(torch.randn(q.shape, generator=gen), problem.get("layout", "contiguous"), dtype, device)
    o, lse = math_.reference_forward(inputs)
    inputs["o"], inputs["lse"] = o.to(dtype), lse.to(compute_dtype(dtype))
    return inputs


def _launch_spec(inputs: Inputs, config: dict, out):
    dq, dk, dv = out
    q, k, v, o, do = (unit_stride(inputs[n]) for n in ("q", "k", "v", "o", "do"))
    launch(do, q, k, v, o, inputs["lse"], dq, dk, dv, inputs["is_causal"], inputs["scale"], config)
    return out


def backward(do, q, k, v, o, lse, causal: bool, scale: float):
    """The tuned backward: (dq, dk, dv), each contiguous in its input's shape."""
    batch, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    do, q, k, v, o = (unit_stride(t) for t in (do, q, k, v, o))
    dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    config = dict(BACKWARD_SPACE.default)
    if batch * heads * nq and nk:
        key = (batch, heads, kv_heads, nq, nk, d, causal)
        problem = lambda: problems_.problem(batch, heads, nq, d, kv_heads=kv_heads, nk=nk, causal=causal)  # noqa: E731
        config = _TUNED.lookup(q.dtype, key, lambda: bucket(problem()), problem)
        if gluon_refuses(do, q, k, v, o, lse, dq, dk, dv, causal, scale, config) is not None:  # the best Triton row
            config = _TUNED.config_among(q.dtype, bucket(problem()), problem, "triton", engines.is_triton)
        runtime.note_launch("flash_attn_backward", config)
    launch(do, q, k, v, o, lse.contiguous(), dq, dk, dv, causal, scale, config, checked=True, table=_TUNED)
    return dq, dk, dv


@torch.library.custom_op("autotune::flash_attn_backward", mutates_args=())
def flash_attn_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                        lse: torch.Tensor, is_causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """backward as a torch op: what the forward op's autograd calls, so torch.compile sees one node."""
    return backward(do, q, k, v, o, lse, is_causal, scale)


@flash_attn_backward.register_fake
def _(do, q, k, v, o, lse, is_causal, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _public(inputs: Inputs):
    return flash_attn_backward(inputs["do"], inputs["q"], inputs["k"], inputs["v"], inputs["o"], inputs["lse"],
                               inputs["is_causal"], inputs["scale"])


TRITON_SOURCES = (round_to, scalar, widen, exp_, mma, load_rows, key_blocks, score_multiplier, _delta_kernel, _row_lse,
                  _row_delta, _dkdv_step, _attn_bwd_dkdv_kernel, _query_step, _attn_bwd_query_kernel, DELTA_ROWS)
"""The Triton backward's sources: the spec's before the Gluon engine."""
GLUON_SOURCES = (gluon_._rows_kernel, gluon_.ROWS_PAD, gluon_.ROWS_BLOCK, gluon_dkdv._dkdv_step, gluon_dkdv._dkdv_consumer,
                 gluon_dkdv._dkdv_loader, gluon_dkdv._attn_bwd_dkdv_kernel, gluon_dq._dq_consumer,
                 gluon_dq._attn_bwd_dq_kernel, gluon_forward._loader, gluon_forward._take_turn,
                 gluon_forward._give_turn)
"""The Gluon backward's sources (the dQ pass streams K and V with the Gluon forward's loader; PINGPONG takes turns
with its _take_turn and _give_turn)."""
DV_SOURCES = (_dv_split_step, _attn_bwd_dv_split_kernel, _split_dv, DV_BLOCK_M)
"""The dv="split" pass's sources (its launch too: its tiles are set there, not searched)."""

SPEC = KernelSpec(
    name="flash_attn_backward",
    space=BACKWARD_SPACE,
    launch=_launch_spec,
    reference=math_.reference_backward,
    baseline=math_.baseline_backward,
    problems=lambda max_numel: problems_.problems(max_numel, large=problems_.BACKWARD_LARGE),
    make_inputs=make_inputs,
    bucket=bucket,
    cost=problems_.backward_cost,
    presets=problems_.PRESETS,
    interpreter_presets=problems_.INTERPRETER_PRESETS,
    parse_shape=problems_.parse_shape,
    sources=(*TRITON_SOURCES, *GLUON_SOURCES, *DV_SOURCES),
    # The rows tuned before the Gluon engine (the Triton kernels alone, configs without the engine's parameters), and
    # those tuned before the dV pass (configs without dv: their engine's own dV, P rounded).
    extends=(
        EarlierSpace.before(
            BACKWARD_SPACE, TRITON_SOURCES, new={**engines.TRITON, "dv": "rounded"}, dq=("separate", "atomic")
        ),
        EarlierSpace.before(BACKWARD_SPACE, (*TRITON_SOURCES, *GLUON_SOURCES), new={"dv": "rounded"}),
    ),
    bound="compute",
    dtype_in_problem=True,  # float32 tiles take twice the room (see the space)
    description="flash_attn backward: dq, dk, dv from the saved log-sum-exp (torch baseline: sdpa forward + backward)",
    bucket_edges=lambda problem: problems_.bucket_edges(problem, large=problems_.BACKWARD_LARGE),
    public=_public,
    resources=backward_resources,
)
_TUNED = runtime.tuned(SPEC)
