"""A Hopper-native (sm_90a) attention forward written in Gluon, FlashAttention-3's way: a producer warp streams
K/V tiles by TMA into a NUM_STAGES-deep shared-memory ring guarded by mbarriers; NUM_CONSUMERS warpgroups each
hold BLOCK_M query rows, compute S = Q K^T and O += P V by asynchronous wgmma and the online softmax in
registers, issuing block j's Q K^T before block j-1's P V so that the softmax of one overlaps the other
(intra-warpgroup overlap); with two consumers and PINGPONG they take turns issuing their wgmmas, so one's
softmax runs while the other's matmuls do. Only blocks a causal diagonal or the key end crosses are masked.

Same results as flash_attn's forward for half inputs: o (B, H, Nq, D) and the natural log-sum-exp (B, H, Nq,
float32), causal masks aligned top-left as sdpa's (query i sees keys 0..i), GQA (H a multiple of Hkv).
Written against Triton 3.6's Gluon (`triton.experimental.gluon`, whose API changes between releases). flash_attn's
forward runs it for configs with engine="gluon" (autotune/search_spaces/flash_attn_gluon.py: the variant's
parameters, constraints and config facts). `supported` says why a call cannot run here; importing this module
never fails.
"""

from __future__ import annotations

import math

import torch
import triton

from autotune import gpu
from autotune.kernels.common import launch as launch_
from autotune.kernels.common.grid import cdiv
from autotune.kernels.common.tma_layouts import nvmma_layout
from autotune.search_spaces.flash_attn_gluon import (  # noqa: F401 (the kernel's config facts, used by its callers)
    BARRIER_BYTES,
    CHOICES,
    GLUON_TRITON,
    HEAD_DIMS,
    LOADER_REGISTERS,
    SHARED_MEMORY_BYTES,
    config_problem,
    register_split,
    shared_memory_bytes,
)

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    GLUON_MISSING: str | None = None
    _jit = gluon.jit
except ImportError as error:  # an older Triton, or one built without Gluon
    GLUON_MISSING = f"Triton {triton.__version__} has no Gluon for Hopper ({error})"

    def _jit(fn=None, **options):  # the kernels below are then never compiled
        return fn if fn is not None else (lambda f: f)

LOG2E = 1.4426950408889634
DTYPES = (torch.bfloat16, torch.float16)

DEFAULT_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "NUM_CONSUMERS": 2, "PINGPONG": True,
                  "CONSUMER_REGISTERS": 240}
"""FlashAttention-3's shape for head dim 128: two consumer warpgroups of 64 query rows, 128-key blocks."""


@_jit
def _softmax_block(s, m_i, l_i, key0, row0, nk, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """The online softmax of one key block's scores s (raw Q K^T): (p, new running max, alpha, new running sum),
    maxima in log2 units of the scaled scores (qk_scale = scale * log2(e) > 0, folded into one FMA). MASKED
    drops keys past nk and, CAUSAL, keys after a row's query; every row sees a key in the first block, so
    the running max is finite from then on."""
    if MASKED:
        keys = key0 + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
        ok = gl.expand_dims(keys < nk, 0)
        if CAUSAL:
            rows = row0 + gl.arange(0, BLOCK_M, gl.SliceLayout(1, s_layout))
            ok = ok & (gl.expand_dims(keys, 0) <= gl.expand_dims(rows, 1))
        s = gl.where(ok, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    return p, m_new, alpha, l_i * alpha + gl.sum(p, 1)


@_jit
def _take_turn(turns, section, CONSUMER: gl.constexpr, PINGPONG: gl.constexpr):
    """Ping-pong: wait until the other consumer has issued its wgmmas of this section."""
    if PINGPONG:
        mbarrier.wait(turns.index(CONSUMER), section & 1)


@_jit
def _give_turn(turns, CONSUMER: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(turns.index(1 - CONSUMER))


@_jit
def _consumer(descs, bufs, bars, b, head, bh, tile_start, nq, nk, n_loaded, qk_scale,
              CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
              NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr):
    """One warpgroup: query rows row0.. of head (b, head) against the key blocks it needs of the n_loaded the
    loader streams; writes their o by TMA and their log-sum-exp. Blocks it does not need (a causal tile
    ends earlier than the next consumer's) it releases unread, and takes its turns through them."""
    q_desc, o_desc, lse_ptr = descs
    q_bufs, k_bufs, v_bufs = bufs
    q_bars, k_ready, k_empty, v_ready, v_empty, turns = bars
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    dtype: gl.constexpr = q_desc.dtype

    row0 = tile_start + CONSUMER * BLOCK_M
    end = nk
    clean = nk  # keys below every query of the tile, and present
    if CAUSAL:
        end = gl.minimum(nk, row0 + BLOCK_M)
        clean = gl.minimum(nk, row0 + 1)
    n_blocks = gl.cdiv(end, BLOCK_N)
    n_clean = gl.maximum(clean // BLOCK_N, 1)  # block 0 goes through the masked path (peeled below)

    q_buf = q_bufs.index(CONSUMER)
    q_bar = q_bars.index(CONSUMER)
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [b, head, row0, 0], q_bar, q_buf)
    mbarrier.wait(q_bar, 0)
    q = q_buf.reshape([BLOCK_M, HEAD_DIM])

    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    o = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    if PINGPONG and CONSUMER == 1:
        mbarrier.arrive(turns.index(0))  # consumer 0 issues first
    section = 0

    # Block 0: its scores only; its P V is issued with block 1's Q K^T.
    mbarrier.wait(k_ready.index(0), 0)
    _take_turn(turns, section, CONSUMER, PINGPONG)
    s_tok = warpgroup_mma(q, k_bufs.index(0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0)), s_zero,
                          use_acc=False, is_async=True)
    _give_turn(turns, CONSUMER, PINGPONG)
    section += 1
    s = warpgroup_mma_wait(0, deps=(s_tok,))
    mbarrier.arrive(k_empty.index(0))
    p, m_i, alpha, l_i = _softmax_block(s, m_i, l_i, 0, row0, nk, qk_scale, True, CAUSAL, BLOCK_M, BLOCK_N,
                                        s_layout)
    p = gl.convert_layout(p.to(dtype), p_layout)

    for j in range(1, n_blocks):
        stage = j % NUM_STAGES
        prev = (j - 1) % NUM_STAGES
        mbarrier.wait(k_ready.index(stage), (j // NUM_STAGES) & 1)
        mbarrier.wait(v_ready.index(prev), ((j - 1) // NUM_STAGES) & 1)
        _take_turn(turns, section, CONSUMER, PINGPONG)
        s_tok = warpgroup_mma(q, k_bufs.index(stage).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0)), s_zero,
                              use_acc=False, is_async=True)
        o_tok = warpgroup_mma(p, v_bufs.index(prev).reshape([BLOCK_N, HEAD_DIM]), o, is_async=True)
        _give_turn(turns, CONSUMER, PINGPONG)
        section += 1
        s = warpgroup_mma_wait(1, deps=(s_tok,))  # wgmma groups retire in order: S is done, P V may run on
        mbarrier.arrive(k_empty.index(stage))
        if j < n_clean:
            p_next, m_i, alpha, l_i = _softmax_block(s, m_i, l_i, j * BLOCK_N, row0, nk, qk_scale, False, CAUSAL,
                                                     BLOCK_M, BLOCK_N, s_layout)
        else:
            p_next, m_i, alpha, l_i = _softmax_block(s, m_i, l_i, j * BLOCK_N, row0, nk, qk_scale, True, CAUSAL,
                                                     BLOCK_M, BLOCK_N, s_layout)
        o, p = warpgroup_mma_wait(0, deps=(o_tok, p))
        mbarrier.arrive(v_empty.index(prev))
        o = o * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        p = gl.convert_layout(p_next.to(dtype), p_layout)

    last = (n_blocks - 1) % NUM_STAGES
    mbarrier.wait(v_ready.index(last), ((n_blocks - 1) // NUM_STAGES) & 1)
    _take_turn(turns, section, CONSUMER, PINGPONG)
    o_tok = warpgroup_mma(p, v_bufs.index(last).reshape([BLOCK_N, HEAD_DIM]), o, is_async=True)
    _give_turn(turns, CONSUMER, PINGPONG)
    section += 1
    o, p = warpgroup_mma_wait(0, deps=(o_tok, p))
    mbarrier.arrive(v_empty.index(last))

    for j in range(n_blocks, n_loaded):  # blocks the next consumer's rows need and these do not
        stage = j % NUM_STAGES
        phase = (j // NUM_STAGES) & 1
        mbarrier.wait(k_ready.index(stage), phase)
        mbarrier.arrive(k_empty.index(stage))
        mbarrier.wait(v_ready.index(stage), phase)
        mbarrier.arrive(v_empty.index(stage))
        _take_turn(turns, section, CONSUMER, PINGPONG)
        _give_turn(turns, CONSUMER, PINGPONG)
        section += 1

    o = o / gl.expand_dims(gl.convert_layout(l_i, row_o), 1)
    rows = row0 + gl.arange(0, BLOCK_M, gl.SliceLayout(1, s_layout))
    lse = (m_i + gl.log2(l_i)) * 0.6931471805599453  # natural units
    gl.store(lse_ptr + bh.to(gl.int64) * nq + rows, lse, mask=rows < nq)
    q.store(o.to(dtype))  # Q's buffer is free: every wgmma reading it has retired
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [b, head, row0, 0], q_buf)  # rows past Nq are clipped
    tma.store_wait(0)


@_jit
def _loader(k_desc, v_desc, k_bufs, v_bufs, k_ready, k_empty, v_ready, v_empty, b, kv_head, n_loaded,
            BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr):
    """The producer warp: key blocks 0..n_loaded-1 of (b, kv_head) into the ring, K and V on barriers of their
    own so that Q K^T can start before V lands. Rows past Nk arrive as zeros (TMA clips each dimension)."""
    for j in range(n_loaded):
        stage = j % NUM_STAGES
        phase = (j // NUM_STAGES) & 1
        mbarrier.wait(k_empty.index(stage), phase ^ 1)  # a fresh barrier passes a wait for parity 1
        mbarrier.expect(k_ready.index(stage), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b, kv_head, j * BLOCK_N, 0], k_ready.index(stage),
                                        k_bufs.index(stage))
        mbarrier.wait(v_empty.index(stage), phase ^ 1)
        mbarrier.expect(v_ready.index(stage), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [b, kv_head, j * BLOCK_N, 0], v_ready.index(stage),
                                        v_bufs.index(stage))


@_jit(do_not_specialize=["n_heads", "group", "nq", "nk"])  # one compile serves every length and head count
def _attn_fwd_kernel(q_desc, k_desc, v_desc, o_desc, lse_ptr, n_heads, group, nq, nk, qk_scale,
                     HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                     NUM_STAGES: gl.constexpr, NUM_CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr,
                     PINGPONG: gl.constexpr, CONSUMER_REGISTERS: gl.constexpr):
    """Program (t, bh): NUM_CONSUMERS * BLOCK_M query rows of head bh % n_heads of batch bh // n_heads; causal
    tiles run longest first. The default partition is consumer 0; the others and the loader are workers."""
    tile = gl.program_id(0)
    if CAUSAL:
        tile = gl.num_programs(0) - 1 - tile
    bh = gl.program_id(1)
    b = bh // n_heads
    head = bh % n_heads
    kv_head = head // group
    tile_start = tile * (BLOCK_M * NUM_CONSUMERS)
    loaded_end = nk
    if CAUSAL:
        loaded_end = gl.minimum(nk, tile_start + NUM_CONSUMERS * BLOCK_M)
    n_loaded = gl.cdiv(loaded_end, BLOCK_N)

    q_bufs = gl.allocate_shared_memory(q_desc.dtype, [NUM_CONSUMERS] + q_desc.block_type.shape, q_desc.layout)
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [NUM_STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [NUM_STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_bars = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_CONSUMERS):
        mbarrier.init(q_bars.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)  # each consumer releases each block
        mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)
    fence_async_shared()  # the initialized barriers, visible to the TMA unit

    descs = (q_desc, o_desc, lse_ptr)
    bufs = (q_bufs, k_bufs, v_bufs)
    bars = (q_bars, k_ready, k_empty, v_ready, v_empty, turns)
    # The argument tuples are written out in the calls: a tuple held in a variable loses its constexprs.
    if NUM_CONSUMERS == 1:
        gl.warp_specialize([
            (_consumer, (descs, bufs, bars, b, head, bh, tile_start, nq, nk, n_loaded, qk_scale,
                         0, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL, PINGPONG)),
            (_loader, (k_desc, v_desc, k_bufs, v_bufs, k_ready, k_empty, v_ready, v_empty, b, kv_head, n_loaded,
                       BLOCK_N, NUM_STAGES)),
        ], [1], [24])
    else:
        gl.warp_specialize([
            (_consumer, (descs, bufs, bars, b, head, bh, tile_start, nq, nk, n_loaded, qk_scale,
                         0, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL, PINGPONG)),
            (_consumer, (descs, bufs, bars, b, head, bh, tile_start, nq, nk, n_loaded, qk_scale,
                         1, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, CAUSAL, PINGPONG)),
            (_loader, (k_desc, v_desc, k_bufs, v_bufs, k_ready, k_empty, v_ready, v_empty, b, kv_head, n_loaded,
                       BLOCK_N, NUM_STAGES)),
        ], [4, 1], [CONSUMER_REGISTERS, 24])


def _tma_problem(name: str, t: torch.Tensor) -> str | None:
    size = t.element_size()
    if t.stride(-1) != 1:
        return f"{name} must have unit stride along the head dim for TMA, got strides {tuple(t.stride())}"
    if t.data_ptr() % 16:
        return f"{name} must start at a 16-byte aligned address for TMA"
    if any(s * size % 16 for s, n in zip(t.stride()[:-1], t.shape[:-1]) if n > 1):
        return f"{name}'s strides must be multiples of 16 bytes for TMA, got {tuple(t.stride())}"
    return None


def supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None,
              config: dict | None = None) -> str | None:
    """Why hopper_attention_forward cannot run this call here (no Gluon, another Triton, not an sm_90 GPU, the
    dtype, head dim, shapes, TMA's alignment, the scale, config), or None when it can."""
    if GLUON_MISSING:
        return GLUON_MISSING
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            return f"{name} must be a 4-D tensor (batch, heads, sequence, head dim)"
        if not t.is_cuda:
            return f"{name} is on the {t.device.type}: the kernel needs a Hopper GPU (sm_90)"
        if t.dtype not in DTYPES or t.dtype != q.dtype:
            return f"{name} is {t.dtype}: the kernel takes q, k and v of one dtype in {DTYPES}"
    if k.device != q.device or v.device != q.device:
        return f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}"
    if gpu.interpreter_active():
        return "the Triton interpreter (TRITON_INTERPRET=1) does not run Gluon"
    capability = torch.cuda.get_device_capability(q.device)
    if capability != (9, 0):
        return f"the kernel needs a Hopper GPU (sm_90), this is sm_{capability[0]}{capability[1]}"
    if not triton.__version__.startswith(GLUON_TRITON):
        return f"written against Triton {GLUON_TRITON}x's Gluon API, found Triton {triton.__version__}"
    d = q.shape[-1]
    if d not in HEAD_DIMS or k.shape[-1] != d or v.shape[-1] != d:
        return f"head dims must be one of {HEAD_DIMS} and agree, got {q.shape[-1]}, {k.shape[-1]}, {v.shape[-1]}"
    if k.shape != v.shape or k.shape[0] != q.shape[0]:
        return f"k and v must have one shape and q's batch, got {tuple(k.shape)}, {tuple(v.shape)}, {tuple(q.shape)}"
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        return f"q's heads must be a multiple of k's, got {q.shape[1]} and {k.shape[1]}"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if (problem := _tma_problem(name, t)) is not None:
            return problem
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        return f"scale must be positive and finite (the softmax folds it into a base-2 exponent), got {scale}"
    if config is not None:
        return config_problem(config, d)
    return None


def _tma_strides(t: torch.Tensor) -> list[int]:
    """t's strides, with those of size-1 dims (which TMA never steps along) replaced by contiguous ones."""
    strides = list(t.stride())
    for i in range(t.dim() - 2, -1, -1):
        if t.shape[i] == 1:
            strides[i] = strides[i + 1] * t.shape[i + 1]
    return strides


def _descriptor(t: torch.Tensor, rows: int) -> TensorDescriptor:
    """A TMA descriptor over (B, H, N, D) reading [1, 1, rows, D] tiles, clipping (zero-filling loads) per dim."""
    block = [1, 1, rows, t.shape[-1]]
    return TensorDescriptor(t, list(t.shape), _tma_strides(t), block, nvmma_layout(tuple(block), t.dtype))


def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, causal: bool,
           scale: float, config: dict, table=None):
    """Attention of q (B, H, Nq, D) over k, v (B, Hkv, Nk, D) into o (B, H, Nq, D) and lse (B, H, Nq) float32
    contiguous, with one config, unchecked (see supported); the compiled kernel, or None if nothing ran or the kept
    launch of a public call's runtime `table` ran it (`launch.kept`: bound once per grid and constexprs)."""
    batch, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    if batch * heads * nq == 0:
        return None
    if nk == 0:  # an empty sum: sdpa returns 0
        o.zero_()
        lse.fill_(float("-inf"))
        return None
    block_m, consumers = config["BLOCK_M"], config["NUM_CONSUMERS"]
    maxnreg, _ = register_split(consumers, config["CONSUMER_REGISTERS"])
    grid = (cdiv(nq, block_m * consumers), batch * heads)
    meta = dict(
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=config["BLOCK_N"], NUM_STAGES=config["NUM_STAGES"],
        NUM_CONSUMERS=consumers, CAUSAL=causal, PINGPONG=config["PINGPONG"],
        CONSUMER_REGISTERS=config["CONSUMER_REGISTERS"], num_warps=4, maxnreg=maxnreg,
    )
    return launch_.kept(table, _attn_fwd_kernel, grid, role=tuple(meta.items()))(
        _descriptor(q, block_m), _descriptor(k, config["BLOCK_N"]), _descriptor(v, config["BLOCK_N"]),
        _descriptor(o, block_m), lse, heads, heads // kv_heads, nq, nk, scale * LOG2E, **meta,
    )


def hopper_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                             scale: float | None = None, config: dict | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o (B, H, Nq, D) contiguous, natural log-sum-exp (B, H, Nq) float32) of sdpa's attention with this
    module's kernel and config (DEFAULT_CONFIG where None); ValueError with supported's reason where it
    cannot run."""
    config = dict(DEFAULT_CONFIG if config is None else config)
    if (reason := supported(q, k, v, causal, scale, config)) is not None:
        raise ValueError(f"hopper_attention_forward: {reason}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    launch(q, k, v, o, lse, bool(causal), scale, config)
    return o, lse
