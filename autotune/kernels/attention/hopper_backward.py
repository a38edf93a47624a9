"""A Hopper-native (sm_90a) attention backward written in Gluon, FlashAttention-3's way. A preprocess writes
lse * log2(e) and delta = rowsum(dO * O) per query row (padded, so the kernels read them unmasked); with
DELTA="recomputed" a pass of the dQ kernel (hopper_backward_dq.py) then rewrites delta as rowsum(P * dP) /
rowsum(P) from its own P and dP: the rounded output's delta errs where a row's cancellation leaves dQ small
(search_spaces/flash_attn.py, OUTPUT_DELTA_FAILED). Then one
program per NUM_CONSUMERS * BLOCK_N keys of a key/value head holds its K and V tiles in shared memory while a
producer warp streams the query blocks of every query head of its GQA group (Q and dO, by TMA, into a
NUM_STAGES-deep ring guarded by mbarriers). Each consumer warpgroup owns BLOCK_N of the keys and, per block of
BLOCK_M queries, computes by asynchronous wgmma, keys as tile rows: S^T = K Q^T, P^T = exp2(S^T - lse) in
registers, dP^T = V dO^T (issued with S^T under EARLY_DP), dV += P^T dO, dS^T = P^T (dP^T - delta), dK += dS^T Q,
P^T and dS^T reaching their matmuls through shared memory (hopper_backward_dkdv.py); with PINGPONG the two
consumers take turns issuing them, as the forward's do. With DQ="atomic" it also
computes dQ = dS K and adds it into a float32 buffer by TMA reduce-add (FlashAttention-3's way), each consumer its
own, or with DQ="combined" one add of both consumers' a program; with DQ="separate" a second kernel
(hopper_backward_dq.py) computes dQ, one program per block of queries, without atomics. This module holds the
preprocess, the launcher and what a call and a config must be (the config's facts: search_spaces/flash_attn_backward_gluon.py).

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
from autotune.kernels.attention.hopper_backward_dkdv import _attn_bwd_dkdv_kernel
from autotune.kernels.attention.hopper_backward_dq import launch_dq
from autotune.kernels.attention.hopper_forward import GLUON_MISSING, LOG2E, _descriptor
from autotune.kernels.common import launch as launch_
from autotune.kernels.common.grid import cdiv
from autotune.kernels.common.tma_layouts import nvmma_layout
from autotune.search_spaces.flash_attn_backward_gluon import (  # noqa: F401 (the kernel's config facts)
    BARRIER_BYTES,
    CHOICES,
    DEFAULT_CONFIG,
    config_problem,
    shared_memory_bytes,
)
from autotune.search_spaces.flash_attn_gluon import register_split

if GLUON_MISSING is None:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor


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


def _rows(o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor, table=None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(lse * log2(e), delta, nq_pad): per-row buffers (B * H, nq_pad) float32 of rows padded to ROWS_PAD."""
    batch, heads, nq, d = o.shape
    nq_pad = cdiv(nq, ROWS_PAD) * ROWS_PAD
    lse2, delta = (torch.empty((batch * heads, nq_pad), dtype=torch.float32, device=o.device) for _ in range(2))
    launch_.kept(table, _rows_kernel, (nq_pad // ROWS_BLOCK, batch * heads))(
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
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block, nvmma_layout(tuple(block), torch.float32))


def _addressable(t: torch.Tensor) -> torch.Tensor:
    return t if hopper_forward._tma_problem("t", t) is None else t.clone(memory_format=torch.contiguous_format)


def launch(do, q, k, v, o, lse, dq, dk, dv, causal: bool, scale: float, config: dict, table=None) -> dict:
    """Gradients of attention of q (B, Hq, Nq, D) over k, v (B, Hk, Nk, D) into dq, dk, dv from the output o, its
    natural log-sum-exp (B, Hq, Nq) float32 contiguous and dO, with one config, unchecked (see supported); as
    flash_attn_backward.launch takes them. The compiled kernels by name ("delta", "dkdv", "dq"), None where none
    ran or where the kept launches of a public call's runtime `table` ran them (`launch.kept`)."""
    batch, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    kernels = {"delta": None, "dkdv": None, "dq": None}
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
    lse2, delta, nq_pad = _rows(o, do, lse, table)
    block_m, block_n, consumers = config["BLOCK_M"], config["BLOCK_N"], config["NUM_CONSUMERS"]
    maxnreg, _ = register_split(consumers, config["CONSUMER_REGISTERS"])
    atomic = config["DQ"] in ("atomic", "combined")
    # Added into from many programs, from zero; its rows padded as lse2's and delta's (unused where not atomic).
    make = torch.zeros if atomic else torch.empty
    dq_acc = make((batch, heads, nq_pad if atomic else block_m, d), dtype=torch.float32, device=q.device)
    made: dict[tuple[int, int], TensorDescriptor] = {}

    def descriptor(t: torch.Tensor, rows: int) -> TensorDescriptor:
        """One TMA descriptor per tensor and tile height this call: its kernels read q, k, v and dO alike."""
        key = (id(t), rows)  # the tensors live through the call
        if key not in made:
            made[key] = _descriptor(t, rows)
        return made[key]

    if config["DELTA"] == "recomputed":  # before the kernels that read it
        kernels["delta"] = launch_dq(do, q, k, v, lse2, delta, nq_pad, dq, causal, scale, config, maxnreg,
                                     recompute_delta=True, table=table, descriptor=descriptor)
    meta = dict(
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, NUM_STAGES=config["NUM_STAGES"], NUM_CONSUMERS=consumers,
        CAUSAL=causal, ATOMIC_DQ=atomic, COMBINE_DQ=config["DQ"] == "combined", SPLIT_DS=config["SPLIT_DS"],
        EARLY_DP=config["EARLY_DP"], PINGPONG=config["PINGPONG"], CONSUMER_REGISTERS=config["CONSUMER_REGISTERS"],
        num_warps=4, maxnreg=maxnreg,
    )
    grid = (cdiv(nk, block_n * consumers), batch * kv_heads)
    kernels["dkdv"] = launch_.kept(table, _attn_bwd_dkdv_kernel, grid, role=tuple(meta.items()))(
        descriptor(q, block_m), descriptor(k, block_n), descriptor(v, block_n), descriptor(do, block_m),
        descriptor(dk, block_n), descriptor(dv, block_n), lse2, delta, _float32_descriptor(dq_acc, block_m),
        heads, kv_heads, heads // kv_heads, nq, nk, nq_pad, scale * LOG2E, scale, **meta,
    )
    if atomic:
        torch.mul(dq_acc[:, :, :nq], scale, out=dq)  # the kernel adds dQ unscaled; one pass scales and casts
    else:
        kernels["dq"] = launch_dq(do, q, k, v, lse2, delta, nq_pad, dq, causal, scale, config, maxnreg, table=table,
                                  descriptor=descriptor)
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
