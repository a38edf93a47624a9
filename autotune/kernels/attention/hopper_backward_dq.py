"""The Gluon attention backward's query-side passes: one program per NUM_CONSUMERS * BLOCK_N queries of a query
head, each consumer warpgroup holding BLOCK_N of them (Q, dO, their lse and delta) while the forward's loader warp
streams the key blocks (BLOCK_M keys each) they see through a NUM_STAGES-deep K/V ring: S = Q K^T and dP = dO V^T
by asynchronous wgmma, P = exp2(S - lse); then either the dQ pass (DQ="separate" in hopper_backward.py): dS =
P (dP - delta), dQ += dS K, the sum kept in registers and stored once, so no atomics; or the delta pass
(DELTA="recomputed"): delta = rowsum(P * dP) / rowsum(P) from the kernel's own P and dP, as flash_attn_backward's
delta="recomputed" has it, written before the other kernels read it.
"""

from __future__ import annotations

import torch

from autotune.kernels.attention.hopper_forward import GLUON_MISSING, LOG2E, _descriptor, _jit, _loader
from autotune.kernels.common import launch as launch_
from autotune.kernels.common.grid import cdiv

if GLUON_MISSING is None:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )


@_jit
def _dq_consumer(descs, bufs, bars, ptrs, b, head, bh, tile_start, nq, nq_pad, nk, n_loaded, qk_scale, sm_scale,
                 CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                 NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, SPLIT_DS: gl.constexpr, DELTA: gl.constexpr):
    """One warpgroup: dQ (with DELTA: delta) of query rows row0..row0+BLOCK_M (the kernel's BLOCK_N) against the
    key blocks it needs of the n_loaded streamed; blocks it does not need it releases unread. Keys past Nk
    (zeros) are masked: their P would be exp2(-lse), unbounded."""
    q_desc, do_desc, dq_desc = descs
    q_bufs, do_bufs, k_bufs, v_bufs = bufs
    own_bars, k_ready, k_empty, v_ready, v_empty = bars
    lse_ptr, delta_ptr = ptrs
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    dtype: gl.constexpr = q_desc.dtype

    row0 = tile_start + CONSUMER * BLOCK_M
    end = nk
    clean = nk  # keys below every query of the tile, and present
    if CAUSAL:
        end = gl.minimum(nk, row0 + BLOCK_M)
        clean = gl.minimum(nk, row0 + 1)
    n_blocks = gl.cdiv(end, BLOCK_N)
    n_clean = clean // BLOCK_N

    q_buf = q_bufs.index(CONSUMER)
    own = own_bars.index(CONSUMER)
    mbarrier.expect(own, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [b, head, row0, 0], own, q_buf)
    tma.async_copy_global_to_shared(do_desc, [b, head, row0, 0], own, do_bufs.index(CONSUMER))
    rows = row0 + gl.arange(0, BLOCK_M, gl.SliceLayout(1, s_layout))
    lse = gl.expand_dims(gl.load(lse_ptr + bh.to(gl.int64) * nq_pad + rows), 1)  # padded: no mask
    if not DELTA:
        delta = gl.expand_dims(gl.load(delta_ptr + bh.to(gl.int64) * nq_pad + rows), 1)
    mbarrier.wait(own, 0)
    q = q_buf.reshape([BLOCK_M, HEAD_DIM])
    do = do_bufs.index(CONSUMER).reshape([BLOCK_M, HEAD_DIM])

    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, acc_layout)
    p_dp = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))  # DELTA's sums
    p_sum = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    for j in range(n_loaded):
        stage = j % NUM_STAGES
        phase = (j // NUM_STAGES) & 1
        mbarrier.wait(k_ready.index(stage), phase)
        mbarrier.wait(v_ready.index(stage), phase)
        if j < n_blocks:
            k = k_bufs.index(stage).reshape([BLOCK_N, HEAD_DIM])
            s_tok = warpgroup_mma(q, k.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            dp_tok = warpgroup_mma(do, v_bufs.index(stage).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0)), s_zero,
                                   use_acc=False, is_async=True)
            s = warpgroup_mma_wait(1, deps=(s_tok,))
            p = gl.exp2(s * qk_scale - lse)
            if j >= n_clean:
                keys = j * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
                ok = gl.expand_dims(keys < nk, 0)
                if CAUSAL:
                    ok = ok & (gl.expand_dims(keys, 0) <= gl.expand_dims(rows, 1))
                p = gl.where(ok, p, 0.0)
            dp = warpgroup_mma_wait(0, deps=(dp_tok,))
            mbarrier.arrive(v_empty.index(stage))
            if DELTA:
                p_dp += gl.sum(p * dp, 1)
                p_sum += gl.sum(p, 1)
            else:
                ds = p * (dp - delta)
                ds_hi = ds.to(dtype)
                ds_op = gl.convert_layout(ds_hi, op_layout)
                dq_tok = warpgroup_mma(ds_op, k, dq, is_async=True)
                if SPLIT_DS:
                    ds_lo_op = gl.convert_layout((ds - ds_hi.to(gl.float32)).to(dtype), op_layout)
                    dq_tok = warpgroup_mma(ds_lo_op, k, dq_tok, is_async=True)
                    dq, ds_op, ds_lo_op = warpgroup_mma_wait(0, deps=(dq_tok, ds_op, ds_lo_op))
                else:
                    dq, ds_op = warpgroup_mma_wait(0, deps=(dq_tok, ds_op))
        else:
            mbarrier.arrive(v_empty.index(stage))
        mbarrier.arrive(k_empty.index(stage))
    if DELTA:  # every row below Nq sees a key (key 0), its P there near 1 at the row's largest score
        gl.store(delta_ptr + bh.to(gl.int64) * nq_pad + rows, p_dp / p_sum, mask=rows < nq)
    else:
        q.store((dq * sm_scale).to(dtype))  # Q's buffer is free: every wgmma reading it has retired
        fence_async_shared()
        tma.async_copy_shared_to_global(dq_desc, [b, head, row0, 0], q_buf)  # rows past Nq are clipped
        tma.store_wait(0)


@_jit(do_not_specialize=["n_heads", "group", "nq", "nk"])
def _attn_bwd_dq_kernel(q_desc, do_desc, dq_desc, k_desc, v_desc, lse_ptr, delta_ptr, n_heads, group, nq, nk,
                        nq_pad, qk_scale, sm_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                        NUM_STAGES: gl.constexpr, NUM_CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr,
                        SPLIT_DS: gl.constexpr, DELTA: gl.constexpr, CONSUMER_REGISTERS: gl.constexpr):
    """Program (t, bh): NUM_CONSUMERS * BLOCK_M queries (BLOCK_M here is the config's BLOCK_N) of head
    bh % n_heads of batch bh // n_heads, their dQ (with DELTA: their delta); causal tiles run longest first."""
    tile = gl.program_id(0)
    if CAUSAL:
        tile = gl.num_programs(0) - 1 - tile
    bh = gl.program_id(1)
    b = bh // n_heads
    head = bh % n_heads
    tile_start = tile * (BLOCK_M * NUM_CONSUMERS)
    loaded_end = nk
    if CAUSAL:
        loaded_end = gl.minimum(nk, tile_start + NUM_CONSUMERS * BLOCK_M)
    n_loaded = gl.cdiv(loaded_end, BLOCK_N)
    dtype: gl.constexpr = q_desc.dtype
    q_bufs = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS] + q_desc.block_type.shape, q_desc.layout)
    do_bufs = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS] + do_desc.block_type.shape, do_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + v_desc.block_type.shape, v_desc.layout)
    own_bars = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_CONSUMERS):
        mbarrier.init(own_bars.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)
        mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)
    fence_async_shared()

    descs = (q_desc, do_desc, dq_desc)
    bufs = (q_bufs, do_bufs, k_bufs, v_bufs)
    bars = (own_bars, k_ready, k_empty, v_ready, v_empty)
    ptrs = (lse_ptr, delta_ptr)
    kv_head = head // group
    if NUM_CONSUMERS == 1:
        gl.warp_specialize([
            (_dq_consumer, (descs, bufs, bars, ptrs, b, head, bh, tile_start, nq, nq_pad, nk, n_loaded, qk_scale,
                            sm_scale, 0, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL, SPLIT_DS, DELTA)),
            (_loader, (k_desc, v_desc, k_bufs, v_bufs, k_ready, k_empty, v_ready, v_empty, b, kv_head, n_loaded,
                       BLOCK_N, NUM_STAGES)),
        ], [1], [24])
    else:
        gl.warp_specialize([
            (_dq_consumer, (descs, bufs, bars, ptrs, b, head, bh, tile_start, nq, nq_pad, nk, n_loaded, qk_scale,
                            sm_scale, 0, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL, SPLIT_DS, DELTA)),
            (_dq_consumer, (descs, bufs, bars, ptrs, b, head, bh, tile_start, nq, nq_pad, nk, n_loaded, qk_scale,
                            sm_scale, 1, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL, SPLIT_DS, DELTA)),
            (_loader, (k_desc, v_desc, k_bufs, v_bufs, k_ready, k_empty, v_ready, v_empty, b, kv_head, n_loaded,
                       BLOCK_N, NUM_STAGES)),
        ], [4, 1], [CONSUMER_REGISTERS, 24])


def launch_dq(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse2: torch.Tensor,
              delta: torch.Tensor, nq_pad: int, dq: torch.Tensor, causal: bool, scale: float, config: dict, maxnreg: int,
              *, recompute_delta: bool = False, table=None, descriptor=_descriptor):
    """dQ of attention into dq (q's dtype and shape, TMA-addressable) from lse * log2(e) and delta, (B * Hq, nq_pad)
    float32 (rows padded with zeros to a multiple of 128), with the backward's config (its BLOCK_N queries a
    consumer, BLOCK_M keys a step); with recompute_delta, delta's rows below Nq instead, from the kernel's own P and
    dP (dq untouched). The compiled kernel (None where the kept launch of a public call's `table` ran it). Nq, Nk > 0.
    `descriptor(t, rows)` makes the TMA descriptors (the backward's passes one per tensor and tile height a call)."""
    batch, heads, nq, d = q.shape
    rows, keys = config["BLOCK_N"], config["BLOCK_M"]
    consumers = config["NUM_CONSUMERS"]
    grid = (cdiv(nq, rows * consumers), batch * heads)
    meta = dict(
        HEAD_DIM=d, BLOCK_M=rows, BLOCK_N=keys, NUM_STAGES=config["NUM_STAGES"], NUM_CONSUMERS=consumers,
        CAUSAL=causal, SPLIT_DS=config["SPLIT_DS"], DELTA=recompute_delta, CONSUMER_REGISTERS=config["CONSUMER_REGISTERS"],
        num_warps=4, maxnreg=maxnreg,
    )
    return launch_.kept(table, _attn_bwd_dq_kernel, grid, role=tuple(meta.items()))(
        descriptor(q, rows), descriptor(do, rows), descriptor(dq, rows), descriptor(k, keys),
        descriptor(v, keys), lse2, delta, heads, heads // k.shape[1], nq, k.shape[2], nq_pad, scale * LOG2E, scale,
        **meta,
    )
