"""The Gluon attention backward's dK/dV kernel (hopper_backward.py says what it computes and how): one program per
NUM_CONSUMERS * BLOCK_N keys of a key/value head, a producer warp streaming Q and dO of the group's query blocks by
TMA, consumer warpgroups of 64 keys each running the block's five matmuls by asynchronous wgmma, dQ (DQ "atomic" or
"combined") added into a float32 buffer by TMA reduce-add. With PINGPONG the two consumers take turns issuing each
block's three wgmma groups (S^T; dV; dK with dQ), so that one's elementwise work runs while the other's matmuls do.
"""

from __future__ import annotations

from autotune.kernels.attention.hopper_forward import GLUON_MISSING, _give_turn, _jit, _take_turn

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

    @builtin
    def _tma_add(tensor_desc, coord, src, _semantic=None):
        """Adds the shared-memory tile src into the tensor_desc's tile at coord (cp.reduce.async.bulk.tensor .add),
        tracked as a TMA store (tma.store_wait): Triton 3.6 has the op (tl's descriptor atomic_add lowers to it)
        but Gluon does not expose it."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@_jit
def _dkdv_step(dk, dv, k, v, q_buf, do_buf, tiles, ptrs, dq_bars, turns, i, b, head, row_base, m, key0, nk, masked,
               qk_scale, CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
               CAUSAL: gl.constexpr, ATOMIC_DQ: gl.constexpr, COMBINE_DQ: gl.constexpr, SPLIT_DS: gl.constexpr,
               EARLY_DP: gl.constexpr, PINGPONG: gl.constexpr):
    """Query block m of one head against the held keys: (dk, dv) with its terms added; with ATOMIC_DQ its dQ
    added into the float32 buffer. P^T and dS^T reach their matmuls through shared memory (no register operands
    to hold while the wgmmas run). Queries past Nq load as zeros with lse and delta 0: P = 1 there meets dO = 0
    and Q = 0, adding nothing. Keys past Nk (zeros) are masked: their P would be exp2(-lse), unbounded. With
    PINGPONG each of the three wgmma groups is issued in this consumer's turn (sections 3i, 3i+1, 3i+2)."""
    lse_ptr, delta_ptr, dq_desc = ptrs
    p_buf, ds_buf, ds_lo_buf, dq_buf = tiles
    dq_ready, dq_free = dq_bars
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    dtype: gl.constexpr = k.dtype
    s_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
    _take_turn(turns, 3 * i, CONSUMER, PINGPONG)
    s_tok = warpgroup_mma(k, q_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if EARLY_DP:
        dp_tok = warpgroup_mma(v, do_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    _give_turn(turns, CONSUMER, PINGPONG)
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
    _take_turn(turns, 3 * i + 1, CONSUMER, PINGPONG)
    if not EARLY_DP:
        dp_tok = warpgroup_mma(v, do_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    dv_tok = warpgroup_mma(p_buf, do_buf, dv, is_async=True)
    _give_turn(turns, CONSUMER, PINGPONG)
    delta = gl.load(delta_ptr + (row_base + m * BLOCK_M) + columns)  # loaded late: fewer registers
    dp = warpgroup_mma_wait(1, deps=(dp_tok,))  # groups retire in order: dV may still run
    ds = p * (dp - gl.expand_dims(delta, 0))
    ds_hi = ds.to(dtype)
    ds_buf.store(ds_hi)
    if SPLIT_DS:
        ds_lo_buf.store((ds - ds_hi.to(gl.float32)).to(dtype))
    fence_async_shared()
    takes_other: gl.constexpr = COMBINE_DQ and CONSUMER == 1  # adds the other consumer's dQ to its own
    _take_turn(turns, 3 * i + 2, CONSUMER, PINGPONG)
    if ATOMIC_DQ and not takes_other:  # issued before dK, so that its add overlaps dK's wgmma
        dq_zero = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, acc_layout)
        dq_tok = warpgroup_mma(ds_buf.permute((1, 0)), k, dq_zero, use_acc=False, is_async=True)
        if SPLIT_DS:
            dq_tok = warpgroup_mma(ds_lo_buf.permute((1, 0)), k, dq_tok, is_async=True)
    dk_tok = warpgroup_mma(ds_buf, q_buf, dk, is_async=True)
    if SPLIT_DS:
        dk_tok = warpgroup_mma(ds_lo_buf, q_buf, dk_tok, is_async=True)
    # The second consumer's combined dQ waits for the first's below, out of turn: holding its turn through that
    # wait would stall the first's next S^T behind its own dQ.
    _give_turn(turns, CONSUMER, PINGPONG)
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
                   COMBINE_DQ: gl.constexpr, SPLIT_DS: gl.constexpr, EARLY_DP: gl.constexpr, PINGPONG: gl.constexpr):
    """One warpgroup: dK and dV of keys key0..key0+BLOCK_N over the query blocks the loader streams; blocks
    before the first that sees one of its keys (causal) it releases unread. With COMBINE_DQ the second consumer
    adds each block's dQ of the first to its own and issues the one reduce-add of both (the first consumer sees
    every block its program's loader streams: it never skips one). With PINGPONG a block it skips still takes its
    three turns, so that the two consumers' turns stay in step."""
    dk_desc, dv_desc = descs
    k_bufs, v_bufs, q_bufs, do_bufs, p_bufs, ds_bufs, ds_lo_bufs, dq_bufs = bufs
    kv_bars, q_ready, q_empty, do_ready, do_empty, dq_ready, dq_free, turns = bars
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
    if PINGPONG and CONSUMER == 1:
        mbarrier.arrive(turns.index(0))  # consumer 0 issues first
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
                                do_bufs.index(stage).reshape([BLOCK_M, HEAD_DIM]), tiles, ptrs, dq_bars, turns, i, b,
                                head, row_base, m, key0, nk, masked, qk_scale, CONSUMER, BLOCK_M, BLOCK_N, HEAD_DIM,
                                CAUSAL, ATOMIC_DQ, COMBINE_DQ, SPLIT_DS, EARLY_DP, PINGPONG)
        else:
            if PINGPONG:  # before the wait below: the first consumer's dQ needs these turns
                for section in gl.static_range(3):
                    _take_turn(turns, 3 * i + section, CONSUMER, PINGPONG)
                    _give_turn(turns, CONSUMER, PINGPONG)
            if COMBINE_DQ and CONSUMER == 1:  # none of these keys is seen: the first consumer's dQ alone is added
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
    kv_bars, q_ready, q_empty, do_ready, do_empty, dq_ready, dq_free, turns = bars
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
                          PINGPONG: gl.constexpr, CONSUMER_REGISTERS: gl.constexpr):
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
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # PINGPONG's, one a consumer
    mbarrier.init(dq_ready.index(0), count=1)
    mbarrier.init(dq_free.index(0), count=1)
    for i in gl.static_range(NUM_CONSUMERS):
        mbarrier.init(kv_bars.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=NUM_CONSUMERS)  # each consumer releases each block
        mbarrier.init(do_empty.index(i), count=NUM_CONSUMERS)
    fence_async_shared()  # the initialized barriers, visible to the TMA unit

    descs = (dk_desc, dv_desc)
    bufs = (k_bufs, v_bufs, q_bufs, do_bufs, p_bufs, ds_bufs, ds_lo_bufs, dq_bufs)
    bars = (kv_bars, q_ready, q_empty, do_ready, do_empty, dq_ready, dq_free, turns)
    ptrs = (lse_ptr, delta_ptr, dq_desc)
    # The argument tuples are written out in the calls: a tuple held in a variable loses its constexprs.
    if NUM_CONSUMERS == 1:
        gl.warp_specialize([
            (_dkdv_consumer, (descs, bufs, bars, ptrs, b, kv_head, n0, n_heads, group, nq_pad, nk, m_lo, n_per_head,
                              n_steps, qk_scale, sm_scale, 0, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL,
                              ATOMIC_DQ, COMBINE_DQ, SPLIT_DS, EARLY_DP, PINGPONG)),
            (_dkdv_loader, (q_desc, do_desc, k_desc, v_desc, bufs, bars, b, kv_head, n0, group, m_lo, n_per_head,
                            n_steps, BLOCK_M, BLOCK_N, NUM_STAGES, NUM_CONSUMERS)),
        ], [1], [24])
    else:
        gl.warp_specialize([
            (_dkdv_consumer, (descs, bufs, bars, ptrs, b, kv_head, n0, n_heads, group, nq_pad, nk, m_lo, n_per_head,
                              n_steps, qk_scale, sm_scale, 0, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL,
                              ATOMIC_DQ, COMBINE_DQ, SPLIT_DS, EARLY_DP, PINGPONG)),
            (_dkdv_consumer, (descs, bufs, bars, ptrs, b, kv_head, n0, n_heads, group, nq_pad, nk, m_lo, n_per_head,
                              n_steps, qk_scale, sm_scale, 1, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL,
                              ATOMIC_DQ, COMBINE_DQ, SPLIT_DS, EARLY_DP, PINGPONG)),
            (_dkdv_loader, (q_desc, do_desc, k_desc, v_desc, bufs, bars, b, kv_head, n0, group, m_lo, n_per_head,
                            n_steps, BLOCK_M, BLOCK_N, NUM_STAGES, NUM_CONSUMERS)),
        ], [4, 1], [CONSUMER_REGISTERS, 24])
