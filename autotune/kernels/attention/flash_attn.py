"""flash_attn: scaled dot-product attention in tiles with an online softmax (a running max and sum per
query), never materializing the Nq x Nk scores; the forward kernels, their launcher, and the public
function (a torch custom op with autograd through the tuned backward kernels).

Half inputs multiply on tensor cores with float32 accumulation, the probabilities rounded to the input
dtype before they multiply V (as FlashAttention does); float32 inputs are computed in float64 (see
_attn_tiles), so float32 is computed correctly, not fast. The forward also writes each query's natural
log-sum-exp (float32; float64 for float32 inputs), from which the backward recomputes the probabilities.
"""

from __future__ import annotations

import math
import numbers

import torch
import triton
import triton.language as tl

from autotune import gpu, runtime
from autotune.kernels.attention import flash_attn_backward as backward_
from autotune.kernels.attention import hopper_forward as gluon_
from autotune.kernels.attention import problems as problems_
from autotune.kernels.attention import reference as math_
from autotune.kernels.attention.tiles import (
    LN2,
    compute_dtype,
    exp_,
    key_blocks,
    load_rows,
    mma,
    scalar,
    score_multiplier,
    unit_stride,
    upcast,
    widen,
)
from autotune.kernels.common import checks as _checks
from autotune.kernels.common import launch as launch_
from autotune.kernels.common import second_order as _second_order
from autotune.kernels.common.grid import cdiv
from autotune.kernels.common.rounding import round_to
from autotune.search_spaces import flash_attn_gluon as engines
from autotune.search_spaces.flash_attn import FORWARD_SPACE, MAX_HEAD_DIM, block_d, bucket, forward_resources
from autotune.spec import EarlierSpace, Inputs, KernelSpec

COMBINE_ROWS = 16
"""Query rows per program of the kernel that merges key splits."""


@triton.jit
def _fwd_step(acc, m_i, l_i, q, k_src, v_src, start, qi, nk, stride_kn, stride_vn, mult, offs_n, offs_d,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
              DESCRIPTORS: tl.constexpr, UPCAST: tl.constexpr, SPLIT_P: tl.constexpr):
    """One key block of the online softmax: m_i is the running max of the scores (log2 units for half
    inputs), l_i the running sum of their exponentials, acc the running output. SPLIT_P adds P's
    rounding remainder as a second half operand of the P @ V product."""
    k = widen(load_rows(k_src, start, offs_n, stride_kn, nk, offs_d, HEAD_DIM, BLOCK_D, MASKED, DESCRIPTORS), UPCAST)
    s = mma(q, tl.trans(k), None) * mult
    if MASKED:
        keys = start + offs_n
        ok = keys[None, :] < nk
        if CAUSAL:
            ok = ok & (keys[None, :] <= qi[:, None])
        s = tl.where(ok, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = m_new
    if MASKED and CAUSAL:
        # A query that has seen no key yet (a later key split) keeps max -inf; subtract 0 instead of it.
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = exp_(m_i - m_use, UPCAST)
    p = exp_(s - m_use[:, None], UPCAST)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = widen(load_rows(v_src, start, offs_n, stride_vn, nk, offs_d, HEAD_DIM, BLOCK_D, MASKED, DESCRIPTORS), UPCAST)
    p_hi = round_to(p, v.dtype)
    acc = mma(p_hi, v, acc * alpha[:, None])
    if SPLIT_P:
        acc = mma(round_to(p - p_hi.to(p.dtype), v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def _attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    n_heads, head_step, group, pack, nq, nk, mult_hi, mult_lo, split_len,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, EDGES_ONLY: tl.constexpr, DESCRIPTORS: tl.constexpr, SPLIT: tl.constexpr,
    UPCAST: tl.constexpr, SPLIT_P: tl.constexpr,
):
    """Program (m, p, s): tile rows m*BLOCK_M.. of query heads head0.. (head0 = (p % programs per batch) *
    head_step) against key split s. Tile row r is query r // pack of head head0 + r % pack: pack 1 is one
    head per program, pack = group packs a GQA group's heads, which share their keys, into one tile.
    Writes o and the natural log-sum-exp, or with SPLIT the split's normalized output and log-sum-exp (-inf
    where it saw no key), in the compute dtype, at row (s * programs + p) * rows + r, for the combine kernel."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    programs_per_batch = n_heads // head_step
    b = (pid_bh // programs_per_batch).to(tl.int64)
    head0 = (pid_bh % programs_per_batch) * head_step
    kv_head = (head0 // group).to(tl.int64)
    r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    qi = r // pack
    qh = (head0 + r % pack).to(tl.int64)
    row_ok = qi < nq
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    q_rows = b * stride_qb + qh * stride_qh + qi.to(tl.int64) * stride_qm
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    q = widen(q, UPCAST)
    mult = scalar(mult_hi, mult_lo, UPCAST)

    k_base = k_ptr + b * stride_kb + kv_head * stride_kh
    v_base = v_ptr + b * stride_vb + kv_head * stride_vh
    if DESCRIPTORS:
        k_src = tl.make_tensor_descriptor(k_base, shape=[nk, HEAD_DIM], strides=[stride_kn, 1],
                                          block_shape=[BLOCK_N, BLOCK_D])
        v_src = tl.make_tensor_descriptor(v_base, shape=[nk, HEAD_DIM], strides=[stride_vn, 1],
                                          block_shape=[BLOCK_N, BLOCK_D])
    else:
        k_src = k_base
        v_src = v_base
    lo = 0
    hi = nk
    if SPLIT:
        lo = tl.program_id(2) * split_len
        hi = tl.minimum(nk, lo + split_len)
    mid, end = key_blocks(lo, hi, (pid_m * BLOCK_M) // pack, (pid_m * BLOCK_M + BLOCK_M - 1) // pack,
                          BLOCK_N, CAUSAL, EDGES_ONLY)

    m_i = widen(tl.full([BLOCK_M], float("-inf"), tl.float32), UPCAST)
    l_i = widen(tl.zeros([BLOCK_M], tl.float32), UPCAST)
    acc = widen(tl.zeros([BLOCK_M, BLOCK_D], tl.float32), UPCAST)
    for start in range(lo, mid, BLOCK_N):
        acc, m_i, l_i = _fwd_step(acc, m_i, l_i, q, k_src, v_src, start, qi, nk, stride_kn, stride_vn, mult,
                                  offs_n, offs_d, HEAD_DIM, BLOCK_D, False, CAUSAL, DESCRIPTORS, UPCAST, SPLIT_P)
    for start in range(mid, end, BLOCK_N):
        acc, m_i, l_i = _fwd_step(acc, m_i, l_i, q, k_src, v_src, start, qi, nk, stride_kn, stride_vn, mult,
                                  offs_n, offs_d, HEAD_DIM, BLOCK_D, True, CAUSAL, DESCRIPTORS, UPCAST, SPLIT_P)

    if not UPCAST:
        m_i = m_i * LN2  # natural units from here
    mask = row_ok[:, None] & d_ok[None, :]
    if SPLIT:
        seen = l_i > 0.0
        o = acc / tl.where(seen, l_i, 1.0)[:, None]
        lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))
        row = (tl.program_id(2) * tl.num_programs(1) + pid_bh).to(tl.int64) * (nq * pack) + r
        tl.store(o_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], o, mask=mask)
        tl.store(lse_ptr + row, lse, mask=row_ok)
    else:
        o = (acc / l_i[:, None]).to(tl.float32)
        o_rows = b * stride_ob + qh * stride_oh + qi.to(tl.int64) * stride_om
        tl.store(o_ptr + o_rows[:, None] + offs_d[None, :], round_to(o, o_ptr.dtype.element_ty), mask=mask)
        tl.store(lse_ptr + (b * n_heads + qh) * nq + qi, (m_i + tl.log(l_i)).to(lse_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def _combine_splits_kernel(
    o_part_ptr, lse_part_ptr, o_ptr, lse_ptr, stride_ob, stride_oh, stride_om,
    n_splits, n_heads, head_step, pack, nq,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """Merge the key splits' outputs of rows m*BLOCK_M.. of program column p, in the partials' dtype:
    weights exp(lse_s - lse), lse the log of the summed exp(lse_s); rows map to heads and queries as in
    the forward kernel."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = nq * pack
    r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = r < rows
    offs_d = tl.arange(0, BLOCK_D)
    mask = r_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
    m = tl.full([BLOCK_M], float("-inf"), lse_part_ptr.dtype.element_ty)
    for s in range(0, n_splits):
        row = (s * tl.num_programs(1) + pid_bh).to(tl.int64) * rows + r
        m = tl.maximum(m, tl.load(lse_part_ptr + row, mask=r_ok, other=float("-inf")))
    m_use = tl.where(m == float("-inf"), 0.0, m)
    total = tl.zeros([BLOCK_M], lse_part_ptr.dtype.element_ty)
    acc = tl.zeros([BLOCK_M, BLOCK_D], o_part_ptr.dtype.element_ty)
    for s in range(0, n_splits):
        row = (s * tl.num_programs(1) + pid_bh).to(tl.int64) * rows + r
        w = tl.exp(tl.load(lse_part_ptr + row, mask=r_ok, other=float("-inf")) - m_use)
        acc += w[:, None] * tl.load(o_part_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], mask=mask, other=0.0)
        total += w
    programs_per_batch = n_heads // head_step
    b = (pid_bh // programs_per_batch).to(tl.int64)
    qh = ((pid_bh % programs_per_batch) * head_step + r % pack).to(tl.int64)
    qi = (r // pack).to(tl.int64)
    o_rows = b * stride_ob + qh * stride_oh + qi * stride_om
    o = (acc / total[:, None]).to(tl.float32)
    tl.store(o_ptr + o_rows[:, None] + offs_d[None, :], round_to(o, o_ptr.dtype.element_ty), mask=mask)
    tl.store(lse_ptr + (b * n_heads + qh) * nq + qi, (m_use + tl.log(total)).to(lse_ptr.dtype.element_ty), mask=r_ok)


@triton.jit
def _merge_splits(
    o_part_ptr, lse_part_ptr, o_ptr, lse_ptr, stride_ob, stride_oh, stride_om, n_heads, head_step, pack, nq,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, SPLITS: tl.constexpr,
):
    """What _combine_splits_kernel computes for rows m*BLOCK_M.. of program column p, in one pass over the splits
    (a running max, the merged output rescaled as it rises), for the program that arrives last: the loop unrolled,
    so the splits' loads need not wait for each other, and sent to L2 (.cg), where the other programs' partials
    are, not to this SM's L1."""
    rows = nq * pack
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = r < rows
    offs_d = tl.arange(0, BLOCK_D)
    in_tile = r_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
    top = tl.full([BLOCK_M], float("-inf"), lse_part_ptr.dtype.element_ty)
    weight = tl.zeros([BLOCK_M], lse_part_ptr.dtype.element_ty)
    merged = tl.zeros([BLOCK_M, BLOCK_D], o_part_ptr.dtype.element_ty)
    for s in tl.static_range(SPLITS):
        part = (s * tl.num_programs(1) + tl.program_id(1)).to(tl.int64) * rows + r
        lse_s = tl.load(lse_part_ptr + part, mask=r_ok, other=float("-inf"), cache_modifier=".cg")
        o_s = tl.load(o_part_ptr + part[:, None] * HEAD_DIM + offs_d[None, :], mask=in_tile, other=0.0,
                      cache_modifier=".cg")
        new_top = tl.maximum(top, lse_s)
        base = tl.where(new_top == float("-inf"), 0.0, new_top)  # no split has seen a key yet: nothing to weigh
        rescale = tl.exp(top - base)
        w = tl.exp(lse_s - base)
        merged = merged * rescale[:, None] + w[:, None] * o_s
        weight = weight * rescale + w
        top = new_top
    base = tl.where(top == float("-inf"), 0.0, top)
    batch = (tl.program_id(1) // (n_heads // head_step)).to(tl.int64)
    head = ((tl.program_id(1) % (n_heads // head_step)) * head_step + r % pack).to(tl.int64)
    query = (r // pack).to(tl.int64)
    out = (merged / weight[:, None]).to(tl.float32)
    dst = batch * stride_ob + head * stride_oh + query * stride_om
    tl.store(o_ptr + dst[:, None] + offs_d[None, :], round_to(out, o_ptr.dtype.element_ty), mask=in_tile)
    tl.store(lse_ptr + (batch * n_heads + head) * nq + query, (base + tl.log(weight)).to(lse_ptr.dtype.element_ty),
             mask=r_ok)


@triton.jit
def _attn_fwd_last_split_kernel(
    q_ptr, k_ptr, v_ptr, o_part_ptr, lse_part_ptr, o_ptr, lse_ptr, arrivals_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    n_heads, head_step, group, pack, nq, nk, mult_hi, mult_lo, split_len,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, EDGES_ONLY: tl.constexpr, DESCRIPTORS: tl.constexpr, UPCAST: tl.constexpr,
    SPLIT_P: tl.constexpr, SPLITS: tl.constexpr,
):
    """The key-split forward and its merge in one launch (combine="last_split"): program (m, p, s) writes its
    split's partials as _attn_fwd_kernel does with SPLIT, then counts itself in on tile (m, p)'s arrival counter
    (acquire-release, after every thread's stores); the program that arrives last merges the tile's splits
    (_merge_splits) and sets the counter back to 0 for the next launch. Saves the combine kernel's launch and the
    wait for the last wave between the two."""
    _attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_part_ptr, lse_part_ptr,
                     stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                     0, 0, 0, n_heads, head_step, group, pack, nq, nk, mult_hi, mult_lo, split_len,
                     HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N, CAUSAL, EDGES_ONLY, DESCRIPTORS, True, UPCAST, SPLIT_P)
    tl.debug_barrier()  # the partials of every thread written before the count says so
    tile = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    if tl.atomic_add(arrivals_ptr + tile, 1, sem="acq_rel") == SPLITS - 1:
        _merge_splits(o_part_ptr, lse_part_ptr, o_ptr, lse_ptr, stride_ob, stride_oh, stride_om, n_heads, head_step,
                      pack, nq, HEAD_DIM, BLOCK_D, BLOCK_M, SPLITS)
        tl.store(arrivals_ptr + tile, 0)


def descriptor_ok(t: torch.Tensor) -> bool:
    """Whether a (B, H, N, D) tensor's heads can be read through tensor descriptors: 16-byte aligned start
    and strides, unit stride along D, and rows of at least 16 bytes (TMA's rules)."""
    size = t.element_size()
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and t.shape[-1] * size >= 16
            and all(s * size % 16 == 0 for s in t.stride()[:-1]))


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory for the descriptors a kernel builds on the device."""
    return torch.empty(size, dtype=torch.int8, device=gpu.device())


_ARRIVALS: dict[tuple[str, int | None, int], torch.Tensor] = {}


def _arrivals(tiles: int, device: torch.device) -> torch.Tensor:
    """At least `tiles` int32 counters at 0, for _attn_fwd_last_split_kernel: kept per device and stream, since
    every launch leaves them at 0 again, launches one after another on a stream share them (launches running at
    once on two streams get two sets; a CUDA graph keeps the set of the stream it was captured on, so two graphs
    captured on one stream must not be replayed at once)."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device.type, device.index, stream)
    held = _ARRIVALS.get(key)
    if held is None or held.numel() < tiles:
        held = _ARRIVALS[key] = torch.zeros(max(tiles, 2 * (0 if held is None else held.numel())), dtype=torch.int32,
                                            device=device)
    return held


def _at(kernel, grid: tuple[int, ...], planned: bool):
    """kernel[grid]; with `planned` (the public forward's calls) the launch kept for this kernel and grid with the
    runtime's configs (`derived`), bound once (`launch.planned`: a later call skips Triton's binding wherever nothing
    it specializes on changed)."""
    return launch_.kept(_TUNED if planned else None, kernel, grid)


def launch(q, k, v, o, lse, causal: bool, scale: float, config: dict, *, checked: bool = False,
           planned: bool = False) -> None:
    """Attention of q (B, Hq, Nq, D) over k, v (B, Hk, Nk, D), Hq a multiple of Hk, into o (B, Hq, Nq, D)
    and the log-sum-exp lse (B, Hq, Nq, contiguous, of compute_dtype), with one config. Unit stride along D
    is required. `checked`: the caller has asked `gluon_refuses` of this call already. `planned`: the launches
    (either engine's) are kept bound for later calls (`_at`; the Gluon kernel's per grid and constexprs)."""
    if config.get("engine") == "gluon":
        return _launch_gluon(q, k, v, o, lse, causal, scale, config, checked, _TUNED if planned else None)
    batch, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    if batch * heads * nq == 0:
        return
    if nk == 0:  # an empty sum: sdpa returns 0
        o.zero_()
        lse.fill_(float("-inf"))
        return
    group = heads // kv_heads
    pack = group if config["gqa"] == "packed" else 1
    programs = batch * heads // pack
    rows = nq * pack
    block_n = config["BLOCK_N"]
    split_len = cdiv(cdiv(nk, config["KV_SPLITS"]), block_n) * block_n
    splits = cdiv(nk, split_len)
    descriptors = config["kv_load"] == "descriptor" and descriptor_ok(k) and descriptor_ok(v)
    if descriptors:
        triton.set_allocator(_scratch)
    grid = (cdiv(rows, config["BLOCK_M"]), programs, splits)
    meta = dict(
        HEAD_DIM=d, BLOCK_D=block_d(d), BLOCK_M=config["BLOCK_M"], BLOCK_N=block_n, CAUSAL=causal,
        EDGES_ONLY=config["mask"] == "edges", DESCRIPTORS=descriptors, UPCAST=upcast(q.dtype),
        SPLIT_P=config["p"] == "split" and not upcast(q.dtype),  # float64 P has no remainder to add
        num_warps=config["num_warps"], num_stages=config["num_stages"],
    )
    common = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    sizes = (heads, pack, group, pack, nq, nk, *score_multiplier(scale, q.dtype), split_len)
    if splits == 1:
        _at(_attn_fwd_kernel, grid, planned)(q, k, v, o, lse, *common, *o.stride()[:3], *sizes, SPLIT=False, **meta)
        return
    part = dict(dtype=compute_dtype(q.dtype), device=q.device)
    o_part = torch.empty((splits, programs, rows, d), **part)
    lse_part = torch.empty((splits, programs, rows), **part)
    if config.get("combine") == "last_split":
        arrivals = _arrivals(grid[0] * grid[1], q.device)
        _at(_attn_fwd_last_split_kernel, grid, planned)(
            q, k, v, o_part, lse_part, o, lse, arrivals, *common, *o.stride()[:3], *sizes, SPLITS=splits, **meta
        )
        return
    _at(_attn_fwd_kernel, grid, planned)(q, k, v, o_part, lse_part, *common, 0, 0, 0, *sizes, SPLIT=True, **meta)
    _at(_combine_splits_kernel, (cdiv(rows, COMBINE_ROWS), programs), planned)(
        o_part, lse_part, o, lse, *o.stride()[:3], splits, heads, pack, pack, nq,
        HEAD_DIM=d, BLOCK_D=block_d(d), BLOCK_M=COMBINE_ROWS, num_warps=4,
    )


def gluon_refuses(q, k, v, o, causal: bool, scale: float, config: dict) -> str | None:
    """Why a config with engine="gluon" cannot run this call (hopper_forward.supported, an output it cannot
    write through TMA), or None; always None for the Triton engine."""
    if config.get("engine") != "gluon":
        return None
    if not o.is_contiguous():
        return "the Gluon kernel writes a contiguous output"
    return gluon_.supported(q, k, v, causal, scale, engines.kernel_config(config))


def _launch_gluon(q, k, v, o, lse, causal: bool, scale: float, config: dict, checked: bool, table) -> None:
    if not checked and (reason := gluon_refuses(q, k, v, o, causal, scale, config)) is not None:
        raise ValueError(f"flash_attn: engine=gluon cannot run this call: {reason}")
    # o and natural-log lse, as ours; a public call's launch kept bound (table: its runtime configs)
    gluon_.launch(q, k, v, o, lse, causal, scale, engines.kernel_config(config), table)


def _launch_spec(inputs: Inputs, config: dict, out):
    o, lse = out
    q, k, v = (unit_stride(inputs[n]) for n in ("q", "k", "v"))
    launch(q, k, v, o, lse, inputs["is_causal"], inputs["scale"], config)
    return out


def _public(inputs: Inputs):
    return flash_attn(inputs["q"], inputs["k"], inputs["v"], is_causal=inputs["is_causal"], scale=inputs["scale"],
                      enable_gqa=inputs["enable_gqa"])


TRITON_SOURCES = (round_to, scalar, widen, exp_, mma, load_rows, key_blocks, score_multiplier, _fwd_step,
                  _attn_fwd_kernel, _combine_splits_kernel, COMBINE_ROWS)
"""The Triton forward's sources: the spec's before the Gluon engine."""
GLUON_SOURCES = (*TRITON_SOURCES, gluon_._softmax_block, gluon_._take_turn, gluon_._give_turn, gluon_._consumer,
                 gluon_._loader, gluon_._attn_fwd_kernel)
"""The sources with the Gluon engine: the spec's before the key splits could merge in the forward's launch."""

SPEC = KernelSpec(
    name="flash_attn",
    space=FORWARD_SPACE,
    launch=_launch_spec,
    reference=math_.reference_forward,
    baseline=math_.baseline_forward,
    problems=problems_.problems,
    make_inputs=problems_.forward_inputs,
    bucket=bucket,
    cost=problems_.forward_cost,
    presets=problems_.PRESETS,
    interpreter_presets=problems_.INTERPRETER_PRESETS,
    parse_shape=problems_.parse_shape,
    sources=(*GLUON_SOURCES, _merge_splits, _attn_fwd_last_split_kernel),
    # The rows tuned before the Gluon engine (the Triton kernels alone, configs without the engine's parameters),
    # and those tuned before combine="last_split" (configs without `combine`: their splits merged by the kernel).
    extends=(
        EarlierSpace.before(FORWARD_SPACE, TRITON_SOURCES, new={**engines.TRITON, "combine": "kernel"}),
        EarlierSpace.before(FORWARD_SPACE, GLUON_SOURCES, new={"combine": "kernel"}),
    ),
    bound="compute",
    dtype_in_problem=True,  # float32 tiles take twice the room (see the space)
    description="attention (sdpa semantics: causal, scale, GQA) with an online softmax: o and the log-sum-exp",
    bucket_edges=problems_.bucket_edges,
    public=_public,
    error_floor=math_.forward_floor,
    resources=forward_resources,
)
_TUNED = runtime.tuned(SPEC)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float):
    """The tuned forward: (o (B, Hq, Nq, D) contiguous, log-sum-exp (B, Hq, Nq) of compute_dtype)."""
    batch, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    q, k, v = unit_stride(q), unit_stride(k), unit_stride(v)
    o = q.new_empty((batch, heads, nq, d))
    lse = q.new_empty((batch, heads, nq), dtype=compute_dtype(q.dtype))
    if o.numel() and nk:
        key = (batch, heads, kv_heads, nq, nk, d, causal)
        problem = lambda: problems_.problem(batch, heads, nq, d, kv_heads=kv_heads, nk=nk, causal=causal)  # noqa: E731
        config = _TUNED.lookup(q.dtype, key, lambda: bucket(problem()), problem)
        if gluon_refuses(q, k, v, o, causal, scale, config) is not None:  # a view TMA cannot read: the best Triton row
            config = _TUNED.config_among(q.dtype, bucket(problem()), problem, "triton", engines.is_triton)
        runtime.note_launch("flash_attn", config)
    else:
        config = dict(FORWARD_SPACE.default)  # nothing to compute: launch() fills or skips
    launch(q, k, v, o, lse, causal, scale, config, checked=True, planned=True)
    return o, lse


@torch.library.custom_op("autotune::flash_attn", mutates_args=())
def _flash_attn_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    return forward(q, k, v, is_causal, scale)


@_flash_attn_op.register_fake
def _(q, k, v, is_causal, scale):
    batch, heads, nq, d = q.shape
    return q.new_empty((batch, heads, nq, d)), q.new_empty((batch, heads, nq), dtype=compute_dtype(q.dtype))


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, is_causal, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.is_causal, ctx.scale = is_causal, scale


_SECOND_ORDER = ("for them, use torch.nn.functional.scaled_dot_product_attention under "
                 "torch.nn.attention.sdpa_kernel(SDPBackend.MATH)")


def _gradients(grads, do, q, k, v):
    """The backward's (dq, dk, dv), refusing a second backward through them where it records one."""
    if _second_order.recording():
        grads = _second_order.refuse("flash_attn", grads, (do, q, k, v), _SECOND_ORDER)
    return (*grads, None, None)


def _flash_attn_backward(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    return _gradients(backward_.flash_attn_backward(do, q, k, v, o, lse, ctx.is_causal, ctx.scale), do, q, k, v)


_flash_attn_op.register_autograd(_flash_attn_backward, setup_context=_setup_context)


class _EagerFlashAttn(torch.autograd.Function):
    """The op's forward and backward for an eager call that records a graph, without the op's dispatch (on the
    H100's host about 0.2 ms of a forward + backward's 1 ms: docs/kernels.md, on eager calls)."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal: bool, scale: float):
        o, lse = forward(q, k, v, is_causal, scale)
        ctx.save_for_backward(q, k, v, o, lse)  # as _setup_context does
        ctx.is_causal, ctx.scale = is_causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return _gradients(backward_.backward(do, q, k, v, o, lse, ctx.is_causal, ctx.scale), do, q, k, v)


def _check(q, k, v, is_causal, scale, enable_gqa) -> float:
    """Validate a call as sdpa would take it, before any launch; the softmax scale, resolved."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _checks.float_tensor(name, t)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (batch, heads, sequence, head dim), got shape {tuple(t.shape)}")
    for name, t in (("k", k), ("v", v)):
        _checks.same_device("q", q, name, t)
        _checks.same_dtype("q", q, name, t)
    for name, flag in (("is_causal", is_causal), ("enable_gqa", enable_gqa)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree in batch, heads and length, got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must have one batch size, got {q.shape[0]} and {k.shape[0]}")
    d = q.shape[-1]
    if k.shape[-1] != d or v.shape[-1] != d:
        raise ValueError(f"q, k and v must have one head dim, got {d}, {k.shape[-1]} and {v.shape[-1]}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head dim must be in 1..{MAX_HEAD_DIM}, got {d}")
    heads, kv_heads = q.shape[1], k.shape[1]
    if enable_gqa:
        if kv_heads == 0 or heads % kv_heads:
            raise ValueError(f"with enable_gqa, q's heads must be a multiple of k's and v's, got {heads} and {kv_heads}")
    elif kv_heads != heads and kv_heads != 1:
        raise ValueError(f"q and k must have one number of heads (or k one head, broadcast), got {heads} and "
                         f"{kv_heads}; pass enable_gqa=True for grouped-query attention")
    if scale is None:
        return 1.0 / math.sqrt(d)
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def flash_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
               scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=, scale=, enable_gqa=) for
    (B, H, N, D) tensors, with the tuned config: causal masks aligned top-left as there, Nq != Nk, grouped
    heads, head dims 1..256. Differentiable in q, k and v through the tuned backward kernels (once: a second
    backward through them raises NotImplementedError, as torch's flash backend does); a torch custom op, so it
    works under torch.compile(fullgraph=True)."""
    scale = _check(q, k, v, is_causal, scale, enable_gqa)
    eager = _checks.EAGER_TYPES
    if torch.compiler.is_compiling() or not (type(q) in eager and type(k) in eager and type(v) in eager):
        return _flash_attn_op(q, k, v, is_causal, scale)[0]  # what torch.compile traces; fake tensors run its fake
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _EagerFlashAttn.apply(q, k, v, is_causal, scale)
    return forward(q, k, v, is_causal, scale)[0]  # no graph to record: skip the custom op's dispatch
