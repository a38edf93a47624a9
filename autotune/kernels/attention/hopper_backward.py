"""A Hopper-native (sm_90a) attention backward written in Gluon, FlashAttention-3's way. A preprocess writes
delta = rowsum(dO * O) and lse * log2(e) per query row (padded, so the kernels read them unmasked). Then one
program per NUM_CONSUMERS * BLOCK_N keys of a key/value head holds its K and V tiles in shared memory while a
producer warp streams the query blocks of every query head of its GQA group (Q and dO, by TMA, into a
NUM_STAGES-deep ring guarded by mbarriers). Each consumer warpgroup owns BLOCK_N of the keys and, per block of
BLOCK_M queries, computes by asynchronous wgmma, keys as tile rows: S^T = K Q^T, P^T = exp2(S^T - lse) in
registers, dP^T = V dO^T (issued with S^T under EARLY_DP), dV += P^T dO, dS^T = P^T (dP^T - delta), dK += dS^T Q,
P^T and dS^T reaching their matmuls through shared memory. With DQ="atomic" it also computes dQ = dS K and adds it
into a float32 buffer by TMA reduce-add (FlashAttention-3's way); with DQ="separate" a second kernel
(hopper_backward_dq.py) computes dQ, one program per block of queries, without atomics.

Same results as flash_attn_backward.launch for half inputs: o (B, Hq, Nq, D), the natural log-sum-exp
(B, Hq, Nq) float32 contiguous, dO; dq, dk, dv in q's, k's, v's shapes; causal aligned top-left; GQA (Hq a
multiple of Hk). dS is rounded to the input dtype for its matmuls (as FlashAttention does); SPLIT_DS adds the
rounding remainder as a second operand (flash_attn_backward's ds="split"). Written against Triton 3.6's Gluon;
`supported` says why a call cannot run here, and importing this module never fails.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from autotune.kernels.attention import hopper_forward
from autotune.kernels.attention.hopper_backward_config import (  # noqa: F401 (the kernel's config facts)
    BARRIER_BYTES,
    CHOICES,
    DEFAULT_CONFIG,
    config_problem,
    shared_memory_bytes,
)
from autotune.kernels.attention.hopper_backward_dq import launch_dq
from autotune.kernels.attention.hopper_forward import GLUON_MISSING, LOG2E, _descriptor, _jit
from autotune.kernels.common.grid import cdiv
from autotune.search_spaces.flash_attn_gluon import register_split

if GLUON_MISSING is None:
    from triton._C.libtriton import ir
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language._core import builtin
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    @builtin
    def _tma_add(tensor_desc, coord, src, _semantic=None):
        """Adds the shared-memory tile src into the tensor_desc's tile at coord (cp.reduce.async.bulk.tensor .add),
        tracked as a TMA store (tma.store_wait): Triton 3.6 has the op (tl's descriptor atomic_add lowers to it)
        but Gluon does not expose it."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@_jit
def _dkdv_step(dk, dv, k, v, q_buf, do_buf, tiles, ptrs, dq_bars, i, b, head, row_base, m, key0, nk, masked, qk_scale,
               CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
               CAUSAL: gl.constexpr, ATOMIC_DQ: gl.constexpr, COMBINE_DQ: gl.constexpr, SPLIT_DS: gl.constexpr,
               EARLY_DP: gl.constexpr):
    """Query block m of one head against the held keys: (dk, dv) with its terms added; with ATOMIC_DQ its dQ
    added into the float32 buffer. P^T and dS^T reach their matmuls through shared memory (no register operands
    to hold while the wgmmas run). Queries past Nq load as zeros with lse and delta 0: P = 1 there meets dO = 0
    and Q = 0, adding nothing. Keys past Nk (zeros) are masked: their P would be exp2(-lse), unbounded."""
    lse_ptr, delta_ptr, dq_desc = ptrs
    p_buf, ds_buf, ds_lo_buf, dq_buf = tiles
    dq_ready, dq_free = dq_bars
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    dtype: gl.constexpr = k.dtype
    s_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
    s_tok = warpgroup_mma(k, q_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if EARLY_DP:
        dp_tok = warpgroup_mma(v, do_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    columns = gl.arange(0, BLOCK_M, gl.SliceLayout(0, s_layout))
    lse = gl.load(lse_ptr + (row_base + m * BLOCK_M) + columns)  # padded rows: no mask, constant offsets
    if EARLY_DP:
        s = warpgroup_mma_wait(1, deps=(s_tok,))  # groups retire in order: dP^T may still run
    else:
        s = warpgroup_mma_wait(0, deps=(s_tok,))
    p = gl.exp2(s * qk_scale - gl.expand_dims(lse, 0))
    if masked:  # in tile coordinates, so that no index vector lives across the loop
        rows = gl.arange(0, BLOCK_N, gl.SliceLayout(1, s_layout))
        ok = gl.expand_dims(rows < nk - key0, 1)
        if CAUSAL:
            ok = ok & (gl.expand_dims(rows + (key0 - m * BLOCK_M), 1) <= gl.expand_dims(columns, 0))
        p = gl.where(ok, p, 0.0)
    p_buf.store(p.to(dtype))  # its last reader, the previous block's dV wgmma, has retired
    fence_async_shared()
    if not EARLY_DP:
        dp_tok = warpgroup_mma(v, do_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    dv_tok = warpgroup_mma(p_buf, do_buf, dv, is_async=True)
    delta = gl.load(delta_ptr + (row_base + m * BLOCK_M) + columns)  # loaded late: fewer registers
    dp = warpgroup_mma_wait(1, deps=(dp_tok,))  # groups retire in order: dV may still run
    ds = p * (dp - gl.expand_dims(delta, 0))
    ds_hi = ds.to(dtype)
    ds_buf.store(ds_hi)
    if SPLIT_DS:
        ds_lo_buf.store((ds - ds_hi.to(gl.float32)).to(dtype))
    fence_async_shared()
    takes_other: gl.constexpr = COMBINE_DQ and CONSUMER == 1  # adds the other consumer's dQ to its own
    if ATOMIC_DQ and not takes_other:  # issued before dK, so that its add overlaps dK's wgmma
        dq_zero = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, acc_layout)
        dq_tok = warpgroup_mma(ds_buf.permute((1, 0)), k, dq_zero, use_acc=False, is_async=True)
        if SPLIT_DS:
            dq_tok = warpgroup_mma(ds_lo_buf.permute((1, 0)), k, dq_tok, is_async=True)
    dk_tok = warpgroup_mma(ds_buf, q_buf, dk, is_async=True)
    if SPLIT_DS:
        dk_tok = warpgroup_mma(ds_lo_buf, q_buf, dk_tok, is_async=True)
    dq_tile = dq_buf.reshape([BLOCK_M, HEAD_DIM])
    if takes_other:
        # The other consumer's dQ of this block, in dq_buf, is the accumulator: one add for the program's keys.
        mbarrier.wait(dq_ready, i & 1)
        dq_tok = warpgroup_mma(ds_buf.permute((1, 0)), k, dq_tile.load(acc_layout), is_async=True)
        if SPLIT_DS:
            dq_tok = warpgroup_mma(ds_lo_buf.permute((1, 0)), k, dq_tok, is_async=True)
        dv, dk, dq = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, dq_tok))
        gl.thread_barrier()  # every thread has read dq_buf
        dq_tile.store(dq)
        fence_async_shared()
        gl.thread_barrier()
        _tma_add(dq_desc, [b, head, m * BLOCK_M, 0], dq_buf)  # unscaled, into the float32 buffer, rows padded
    elif COMBINE_DQ:  # the first consumer hands its dQ to the second
        dv, dq = warpgroup_mma_wait(1, deps=(dv_tok, dq_tok))
        mbarrier.wait(dq_free, (i & 1) ^ 1)  # the second has added the previous block's (a fresh barrier passes)
        dq_tile.store(dq)
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(dq_ready)
        dk = warpgroup_mma_wait(0, deps=(dk_tok,))
    elif ATOMIC_DQ:
        dv, dq = warpgroup_mma_wait(1, deps=(dv_tok, dq_tok))
        tma.store_wait(0)  # the previous block's add has read dq_buf
        gl.thread_barrier()
        dq_tile.store(dq)
        fence_async_shared()
        gl.thread_barrier()
        _tma_add(dq_desc, [b, head, m * BLOCK_M, 0], dq_buf)  # unscaled, into the float32 buffer, rows padded
        dk = warpgroup_mma_wait(0, deps=(dk_tok,))
    else:
        dv, dk = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok))
    return dk, dv


@_jit
def _dkdv_consumer(descs, bufs, bars, ptrs, b, kv_head, n0, n_heads, group, nq_pad, nk, m_lo, n_per_head, n_steps,
                   qk_scale, sm_scale, CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                   HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, ATOMIC_DQ: gl.constexpr,
                   COMBINE_DQ: gl.constexpr, SPLIT_DS: gl.constexpr, EARLY_DP: gl.constexpr):
    """One warpgroup: dK and dV of keys key0..key0+BLOCK_N over the query blocks the loader streams; blocks
    before the first that sees one of its keys (causal) it releases unread. With COMBINE_DQ the second consumer
    adds each block's dQ of the first to its own and issues the one reduce-add of both (the first consumer sees
    every block its program's loader streams: it never skips one)."""
    dk_desc, dv_desc = descs
    k_bufs, v_bufs, q_bufs, do_bufs, p_bufs, ds_bufs, ds_lo_bufs, dq_bufs = bufs
    kv_bars, q_ready, q_empty, do_ready, do_empty, dq_ready, dq_free = bars
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    dtype: gl.constexpr = dk_desc.dtype
    key0 = n0 + CONSUMER * BLOCK_N
    first = m_lo
    if CAUSAL:
        first = key0 // BLOCK_M  # the first query block that sees one of these keys
    ragged = key0 + BLOCK_N > nk
    k_buf = k_bufs.index(CONSUMER)
    v_buf = v_bufs.index(CONSUMER)
    k = k_buf.reshape([BLOCK_N, HEAD_DIM])
    v = v_buf.reshape([BLOCK_N, HEAD_DIM])
    tiles = (p_bufs.index(CONSUMER), ds_bufs.index(CONSUMER), ds_lo_bufs.index(CONSUMER if SPLIT_DS else 0),
             dq_bufs.index(CONSUMER if ATOMIC_DQ and not COMBINE_DQ else 0))
    dq_bars = (dq_ready.index(0), dq_free.index(0))
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, acc_layout)
    mbarrier.wait(kv_bars.index(CONSUMER), 0)
    for i in range(n_steps):
        stage = i % NUM_STAGES
        phase = (i // NUM_STAGES) & 1
        m = m_lo + i % n_per_head
        head = kv_head * group + i // n_per_head
        if COMBINE_DQ and CONSUMER == 1:
            if i > 0:  # the previous block's reduce-add has read dq_buf: the first consumer may write it
                tma.store_wait(0)
                gl.thread_barrier()
                mbarrier.arrive(dq_free.index(0))
        mbarrier.wait(q_ready.index(stage), phase)
        mbarrier.wait(do_ready.index(stage), phase)
        if m >= first:
            masked = ragged
            if CAUSAL:
                masked = masked | (m * BLOCK_M < key0 + BLOCK_N - 1)
            row_base = (b * n_heads + head).to(gl.int64) * nq_pad
            dk, dv = _dkdv_step(dk, dv, k, v, q_bufs.index(stage).reshape([BLOCK_M, HEAD_DIM]),
                                do_bufs.index(stage).reshape([BLOCK_M, HEAD_DIM]), tiles, ptrs, dq_bars, i, b, head,
                                row_base, m, key0, nk, masked, qk_scale, CONSUMER, BLOCK_M, BLOCK_N, HEAD_DIM, CAUSAL,
                                ATOMIC_DQ, COMBINE_DQ, SPLIT_DS, EARLY_DP)
        elif COMBINE_DQ and CONSUMER == 1:  # none of these keys is seen: the first consumer's dQ alone is added
            mbarrier.wait(dq_ready.index(0), i & 1)
            _tma_add(ptrs[2], [b, head, m * BLOCK_M, 0], dq_bufs.index(0))
        mbarrier.arrive(q_empty.index(stage))
        mbarrier.arrive(do_empty.index(stage))
    k.store((dk * sm_scale).to(dtype))  # K and V are free: every wgmma reading them has retired
    v.store(dv.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [b, kv_head, key0, 0], k_buf)  # rows past Nk are clipped
    tma.async_copy_shared_to_global(dv_desc, [b, kv_head, key0, 0], v_buf)
    tma.store_wait(0)


@_jit
def _dkdv_loader(q_desc, do_desc, k_desc, v_desc, bufs, bars, b, kv_head, n0, group, m_lo, n_per_head, n_steps,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                 NUM_CONSUMERS: gl.constexpr):
    """The producer warp: each consumer's K and V once, then Q and dO of query blocks m_lo.. of each query head
    of the group, on barriers of their own so that S^T can start before dO lands. Rows past the ends arrive as
    zeros (TMA clips each dimension)."""
    k_bufs, v_bufs, q_bufs, do_bufs, p_bufs, ds_bufs, ds_lo_bufs, dq_bufs = bufs
    kv_bars, q_ready, q_empty, do_ready, do_empty, dq_ready, dq_free = bars
    for c in gl.static_range(NUM_CONSUMERS):
        mbarrier.expect(kv_bars.index(c), k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b, kv_head, n0 + c * BLOCK_N, 0], kv_bars.index(c), k_bufs.index(c))
        tma.async_copy_global_to_shared(v_desc, [b, kv_head, n0 + c * BLOCK_N, 0], kv_bars.index(c), v_bufs.index(c))
    for i in range(n_steps):
        stage = i % NUM_STAGES
        phase = (i // NUM_STAGES) & 1
        row = (m_lo + i % n_per_head) * BLOCK_M
        head = kv_head * group + i // n_per_head
        mbarrier.wait(q_empty.index(stage), phase ^ 1)  # a fresh barrier passes a wait for parity 1
        mbarrier.expect(q_ready.index(stage), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [b, head, row, 0], q_ready.index(stage), q_bufs.index(stage))
        mbarrier.wait(do_empty.index(stage), phase ^ 1)
        mbarrier.expect(do_ready.index(stage), do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(do_desc, [b, head, row, 0], do_ready.index(stage), do_bufs.index(stage))


@_jit(do_not_specialize=["n_heads", "n_kv_heads", "group", "nq", "nk"])
def _attn_bwd_dkdv_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_ptr, delta_ptr, dq_desc, n_heads,
                          n_kv_heads, group, nq, nk, nq_pad, qk_scale, sm_scale, HEAD_DIM: gl.constexpr,
                          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                          NUM_CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr, ATOMIC_DQ: gl.constexpr,
                          COMBINE_DQ: gl.constexpr, SPLIT_DS: gl.constexpr, EARLY_DP: gl.constexpr,
                          CONSUMER_REGISTERS: gl.constexpr):
    """Program (n, bh): keys n * NUM_CONSUMERS * BLOCK_N.. of key/value head bh % n_kv_heads of batch
    bh // n_kv_heads, against every query block of its group that sees one of them."""
    n0 = gl.program_id(0) * (BLOCK_N * NUM_CONSUMERS)
    bh = gl.program_id(1)
    b = bh // n_kv_heads
    kv_head = bh % n_kv_heads
    n_m = gl.cdiv(nq, BLOCK_M)
    m_lo = 0
    if CAUSAL:
        m_lo = gl.minimum(n0 // BLOCK_M, n_m)
    n_per_head = gl.maximum(n_m - m_lo, 1)
    n_steps = group * (n_m - m_lo)
    dtype: gl.constexpr = q_desc.dtype
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    lo_count: gl.constexpr = NUM_CONSUMERS if SPLIT_DS else 1
    dq_count: gl.constexpr = NUM_CONSUMERS if ATOMIC_DQ and not COMBINE_DQ else 1
    k_bufs = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS] + v_desc.block_type.shape, v_desc.layout)
    q_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + q_desc.block_type.shape, q_desc.layout)
    do_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + do_desc.block_type.shape, do_desc.layout)
    p_bufs = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, BLOCK_N, BLOCK_M], ds_layout)
    ds_bufs = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, BLOCK_N, BLOCK_M], ds_layout)
    ds_lo_bufs = gl.allocate_shared_memory(dtype, [lo_count, BLOCK_N, BLOCK_M], ds_layout)
    dq_bufs = gl.allocate_shared_memory(gl.float32, [dq_count] + dq_desc.block_type.shape, dq_desc.layout)
    kv_bars = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS, 1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    do_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    dq_ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    dq_free = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(dq_ready.index(0), count=1)
    mbarrier.init(dq_free.index(0), count=1)
    for i in gl.static_range(NUM_CONSUMERS):
        mbarrier.init(kv_bars.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=NUM_CONSUMERS)  # each consumer releases each block
        mbarrier.init(do_empty.index(i), count=NUM_CONSUMERS)
    fence_async_shared()  # the initialized barriers, visible to the TMA unit

    descs = (dk_desc, dv_desc)
    bufs = (k_bufs, v_bufs, q_bufs, do_bufs, p_bufs, ds_bufs, ds_lo_bufs, dq_bufs)
    bars = (kv_bars, q_ready, q_empty, do_ready, do_empty, dq_ready, dq_free)
    ptrs = (lse_ptr, delta_ptr, dq_desc)
    # The argument tuples are written out in the calls: a tuple held in a variable loses its constexprs.
    if NUM_CONSUMERS == 1:
        gl.warp_specialize([
            (_dkdv_consumer, (descs, bufs, bars, ptrs, b, kv_head, n0, n_heads, group, nq_pad, nk, m_lo, n_per_head,
                              n_steps, qk_scale, sm_scale, 0, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL,
                              ATOMIC_DQ, COMBINE_DQ, SPLIT_DS, EARLY_DP)),
            (_dkdv_loader, (q_desc, do_desc, k_desc, v_desc, bufs, bars, b, kv_head, n0, group, m_lo, n_per_head,
                            n_steps, BLOCK_M, BLOCK_N, NUM_STAGES, NUM_CONSUMERS)),
        ], [1], [24])
    else:
        gl.warp_specialize([
            (_dkdv_consumer, (descs, bufs, bars, ptrs, b, kv_head, n0, n_heads, group, nq_pad, nk, m_lo, n_per_head,
                              n_steps, qk_scale, sm_scale, 0, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL,
                              ATOMIC_DQ, COMBINE_DQ, SPLIT_DS, EARLY_DP)),
            (_dkdv_consumer, (descs, bufs, bars, ptrs, b, kv_head, n0, n_heads, group, nq_pad, nk, m_lo, n_per_head,
                              n_steps, qk_scale, sm_scale, 1, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL,
                              ATOMIC_DQ, COMBINE_DQ, SPLIT_DS, EARLY_DP)),
            (_dkdv_loader, (q_desc, do_desc, k_desc, v_desc, bufs, bars, b, kv_head, n0, group, m_lo, n_per_head,
                            n_steps, BLOCK_M, BLOCK_N, NUM_STAGES, NUM_CONSUMERS)),
        ], [4, 1], [CONSUMER_REGISTERS, 24])


ROWS_PAD = 128
"""The query rows of the per-row buffers (lse in log2 units, delta, the atomic dQ's) round up to a multiple of this
(of every BLOCK_M): the kernels read and add into them without masks, at addresses a constant apart."""
ROWS_BLOCK = 32


@triton.jit
def _rows_kernel(o_ptr, do_ptr, lse_ptr, lse2_ptr, delta_ptr, stride_ob, stride_oh, stride_om, stride_db, stride_dh,
                 stride_dm, n_heads, nq, nq_pad, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Rows m*BLOCK_M.. of head bh: delta = rowsum(dO * O) summed in float64, and lse * log2(e), into (B * H,
    nq_pad) float32 buffers, 0 past Nq."""
    bh = tl.program_id(1)
    b = (bh // n_heads).to(tl.int64)
    h = (bh % n_heads).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    ok = rows < nq
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + rows[:, None].to(tl.int64) * stride_om + cols[None, :],
                mask=ok[:, None], other=0.0)
    do = tl.load(do_ptr + b * stride_db + h * stride_dh + rows[:, None].to(tl.int64) * stride_dm + cols[None, :],
                 mask=ok[:, None], other=0.0)
    delta = tl.sum(o.to(tl.float32).to(tl.float64) * do.to(tl.float32).to(tl.float64), 1)
    lse = tl.load(lse_ptr + bh.to(tl.int64) * nq + rows, mask=ok, other=0.0)
    out = bh.to(tl.int64) * nq_pad + rows
    tl.store(delta_ptr + out, delta.to(tl.float32))
    tl.store(lse2_ptr + out, lse * 1.4426950408889634)


def _rows(o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(lse * log2(e), delta, nq_pad): per-row buffers (B * H, nq_pad) float32 of rows padded to ROWS_PAD."""
    batch, heads, nq, d = o.shape
    nq_pad = cdiv(nq, ROWS_PAD) * ROWS_PAD
    lse2, delta = (torch.empty((batch * heads, nq_pad), dtype=torch.float32, device=o.device) for _ in range(2))
    _rows_kernel[(nq_pad // ROWS_BLOCK, batch * heads)](
        o, do, lse, lse2, delta, *o.stride()[:3], *do.stride()[:3], heads, nq, nq_pad,
        HEAD_DIM=d, BLOCK_M=ROWS_BLOCK, num_warps=4,
    )
    return lse2, delta, nq_pad


def supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None,
              config: dict | None = None, grads: tuple[torch.Tensor, ...] = ()) -> str | None:
    """Why the backward cannot run this call here (what hopper_forward.supported refuses, the config, or an
    output in grads, dq dk dv, that TMA cannot address), or None when it can. o and dO are q's shape: the
    launch makes them TMA-addressable (a copy where they are not)."""
    if (reason := hopper_forward.supported(q, k, v, causal, scale)) is not None:
        return reason
    for name, grad, like in zip(("dq", "dk", "dv"), grads, (q, k, v)):
        if grad.shape != like.shape or grad.dtype != like.dtype or grad.device != like.device:
            return f"{name} must have its input's shape, dtype and device, got {tuple(grad.shape)} {grad.dtype}"
        if (problem := hopper_forward._tma_problem(name, grad)) is not None:
            return problem
    return None if config is None else config_problem(config, q.shape[-1])


def _float32_descriptor(t: torch.Tensor, rows: int) -> TensorDescriptor:
    """A TMA descriptor over a contiguous float32 (B, H, N, D), adding [1, 1, rows, D] tiles."""
    block = [1, 1, rows, t.shape[-1]]
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block,
                            gl.NVMMASharedLayout.get_default_for(block, gl.float32))


def _addressable(t: torch.Tensor) -> torch.Tensor:
    return t if hopper_forward._tma_problem("t", t) is None else t.clone(memory_format=torch.contiguous_format)


def launch(do, q, k, v, o, lse, dq, dk, dv, causal: bool, scale: float, config: dict) -> dict:
    """Gradients of attention of q (B, Hq, Nq, D) over k, v (B, Hk, Nk, D) into dq, dk, dv from the output o, its
    natural log-sum-exp (B, Hq, Nq) float32 contiguous and dO, with one config, unchecked (see supported); as
    flash_attn_backward.launch takes them. The compiled kernels by name ("dkdv", "dq"), None where none ran."""
    batch, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    kernels = {"dkdv": None, "dq": None}
    if batch * heads * nq == 0 or nk == 0:  # no query sees a key: every gradient is 0
        for grad in (dq, dk, dv):
            grad.zero_()
        return kernels
    if nk == 1 or (causal and nq == 1):
        # Every query sees one key: P is the constant 1, so dS = 0 and dq = dk = 0 exactly, dv of key 0 is dO
        # summed (as flash_attn_backward.launch gives them; the kernels would give rounding noise for the 0s).
        for grad in (dq, dk, dv):
            grad.zero_()
        dv[:, :, 0] = do.to(torch.float64).unflatten(1, (kv_heads, heads // kv_heads)).sum((2, 3)).to(dv.dtype)
        return kernels
    do, o = _addressable(do), _addressable(o)
    lse2, delta, nq_pad = _rows(o, do, lse)
    block_m, block_n, consumers = config["BLOCK_M"], config["BLOCK_N"], config["NUM_CONSUMERS"]
    maxnreg, _ = register_split(consumers, config["CONSUMER_REGISTERS"])
    atomic = config["DQ"] in ("atomic", "combined")
    # Added into from many programs, from zero; its rows padded as lse2's and delta's (unused where not atomic).
    make = torch.zeros if atomic else torch.empty
    dq_acc = make((batch, heads, nq_pad if atomic else block_m, d), dtype=torch.float32, device=q.device)
    kernels["dkdv"] = _attn_bwd_dkdv_kernel[(cdiv(nk, block_n * consumers), batch * kv_heads)](
        _descriptor(q, block_m), _descriptor(k, block_n), _descriptor(v, block_n), _descriptor(do, block_m),
        _descriptor(dk, block_n), _descriptor(dv, block_n), lse2, delta, _float32_descriptor(dq_acc, block_m), heads, kv_heads, heads // kv_heads,
        nq, nk, nq_pad, scale * LOG2E, scale, HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, NUM_STAGES=config["NUM_STAGES"],
        NUM_CONSUMERS=consumers, CAUSAL=causal, ATOMIC_DQ=atomic, COMBINE_DQ=config["DQ"] == "combined", SPLIT_DS=config["SPLIT_DS"], EARLY_DP=config["EARLY_DP"],
        CONSUMER_REGISTERS=config["CONSUMER_REGISTERS"], num_warps=4, maxnreg=maxnreg,
    )
    if atomic:
        torch.mul(dq_acc[:, :, :nq], scale, out=dq)  # the kernel adds dQ unscaled; one pass scales and casts
    else:
        kernels["dq"] = launch_dq(do, q, k, v, lse2, delta, nq_pad, dq, causal, scale, config, maxnreg)
    return kernels


def hopper_attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                              lse: torch.Tensor, causal: bool = False, scale: float | None = None,
                              config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), each contiguous in its input's shape, of sdpa's attention with this module's kernels and
    config (DEFAULT_CONFIG where None), from its output o and natural log-sum-exp lse (B, H, Nq) float32;
    ValueError with supported's reason where it cannot run. Inputs TMA cannot address are copied first."""
    config = dict(DEFAULT_CONFIG if config is None else config)
    if all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)):
        q, k, v = (_addressable(t) for t in (q, k, v))  # a copy where TMA cannot address a layout
    if (reason := supported(q, k, v, causal, scale, config)) is not None:
        raise ValueError(f"hopper_attention_backward: {reason}")
    for name, t in (("do", do), ("o", o)):
        if t.shape != q.shape or t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"hopper_attention_backward: {name} must have q's shape, dtype and device")
    if lse.shape != q.shape[:3] or lse.dtype != torch.float32:
        raise ValueError(f"hopper_attention_backward: lse must be (B, H, Nq) float32, got {tuple(lse.shape)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    launch(do, q, k, v, o, lse.contiguous(), dq, dk, dv, bool(causal), scale, config)
    return dq, dk, dv
