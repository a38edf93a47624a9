"""The gated GEMM behind gated_mlp: h = act(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up) in one launch, and the
elementwise step of its backward.

Each program loads a block of x once per step along K and multiplies it into two float32 accumulator tiles, the
gate's and the up projection's, against the matching blocks of both weights (any strides: two tensors, or the two
halves of one packed (2H, K) weight). The epilogue adds the biases, applies the activation to the gate's tile,
multiplies, and rounds once on the store; with STORE_GU it also stores both pre-activation tiles, rounded, into one
(M, 2H) tensor [g | u] that the backward reads (its elementwise step, a kernel here, is launched and tuned as
gated_mlp_backward: gated_backward.py). The tile order, the four variants (a program per tile or one per
SM; pointers or tensor-memory-accelerator descriptors) and the float32 product chunks are the GEMM kernels'
(gemm.py), whose @triton.jit helpers these kernels call.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from autotune.kernels.common.grid import cdiv
from autotune.kernels.gemm import gemm as _gemm
from autotune.kernels.gemm.gemm import accumulate, activate, descriptor_block, partial_sums, tile_position

_DESCRIPTOR_ALIGNMENT = 16
"""Bytes the TMA unit needs an operand's address aligned to (gemm.py's rule)."""
BACKWARD_BLOCK = 1024
"""The columns per program the elementwise backward took before gated_mlp_backward's search sized them (its default
still does): in SOURCES, so gated_mlp's stored rows keep their source hash."""


@triton.jit
def _gated_dots_pointers(x_ptr, wg_ptr, wu_ptr, row, col, M, N, K, s_xm, s_xk, s_gk, s_gn, s_uk, s_un,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         EVEN_K: tl.constexpr, PRECISION: tl.constexpr):
    """The float32 (BLOCK_M, BLOCK_N) tiles (g, u) of x @ wg and x @ wu at (row, col), wg and wu read as (K, N)
    through their strides; one x block per step of K feeds both products. Masked lanes load 0, which adds
    nothing to a product."""
    rows = row + tl.arange(0, BLOCK_M)
    cols = col + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    # 64-bit offsets: row * stride passes 2**31 in large matrices.
    x_ptrs = x_ptr + rows.to(tl.int64)[:, None] * s_xm + ks.to(tl.int64)[None, :] * s_xk
    g_ptrs = wg_ptr + ks.to(tl.int64)[:, None] * s_gk + cols.to(tl.int64)[None, :] * s_gn
    u_ptrs = wu_ptr + ks.to(tl.int64)[:, None] * s_uk + cols.to(tl.int64)[None, :] * s_un
    x_step = tl.full((BLOCK_K,), BLOCK_K, tl.int64)[None, :] * s_xk
    g_step = tl.full((BLOCK_K,), BLOCK_K, tl.int64)[:, None] * s_gk
    u_step = tl.full((BLOCK_K,), BLOCK_K, tl.int64)[:, None] * s_uk
    g = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    g_part = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    u = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    u_part = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(x_ptrs, mask=row_ok[:, None], other=0.0)
            bg = tl.load(g_ptrs, mask=col_ok[None, :], other=0.0)
            bu = tl.load(u_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            k_ok = ks < K - k
            a = tl.load(x_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            bg = tl.load(g_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            bu = tl.load(u_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        g, g_part = accumulate(g, g_part, a, bg, k // BLOCK_K, BLOCK_K, PRECISION)
        u, u_part = accumulate(u, u_part, a, bu, k // BLOCK_K, BLOCK_K, PRECISION)
        x_ptrs += x_step
        g_ptrs += g_step
        u_ptrs += u_step
    return partial_sums(g, g_part, PRECISION), partial_sums(u, u_part, PRECISION)


@triton.jit
def _gated_dots_descriptors(x_desc, g_desc, u_desc, row, col, K,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            PRECISION: tl.constexpr, X_T: tl.constexpr, G_T: tl.constexpr, U_T: tl.constexpr):
    """_gated_dots_pointers' tiles, the blocks read by the TMA unit (past an edge they read 0)."""
    g = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    g_part = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    u = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    u_part = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = descriptor_block(x_desc, 0, row, k, BLOCK_M, BLOCK_K, X_T, False)
        bg = descriptor_block(g_desc, 0, k, col, BLOCK_K, BLOCK_N, G_T, False)
        bu = descriptor_block(u_desc, 0, k, col, BLOCK_K, BLOCK_N, U_T, False)
        g, g_part = accumulate(g, g_part, a, bg, k // BLOCK_K, BLOCK_K, PRECISION)
        u, u_part = accumulate(u, u_part, a, bu, k // BLOCK_K, BLOCK_K, PRECISION)
    return partial_sums(g, g_part, PRECISION), partial_sums(u, u_part, PRECISION)


@triton.jit
def _gated_store(g, u, rows, cols, M, N, h_ptr, gu_ptr, bg_ptr, bu_ptr, s_hm, s_hn,
                 ACTIVATION: tl.constexpr, HAS_BG: tl.constexpr, HAS_BU: tl.constexpr, STORE_GU: tl.constexpr):
    """The epilogue: biases, act(g) * u on the float32 tiles, one rounding, a masked store into h (and g, u into
    the contiguous (M, 2N) gu with STORE_GU)."""
    col_ok = cols < N
    if HAS_BG:
        g += tl.load(bg_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_BU:
        u += tl.load(bu_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    mask = (rows[:, None] < M) & col_ok[None, :]
    if STORE_GU:
        gu_offs = rows.to(tl.int64)[:, None] * (2 * N) + cols.to(tl.int64)[None, :]
        tl.store(gu_ptr + gu_offs, g.to(gu_ptr.dtype.element_ty), mask=mask)
        tl.store(gu_ptr + gu_offs + N, u.to(gu_ptr.dtype.element_ty), mask=mask)
    offs = rows.to(tl.int64)[:, None] * s_hm + cols.to(tl.int64)[None, :] * s_hn
    tl.store(h_ptr + offs, (activate(g, ACTIVATION) * u).to(h_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gated_tile(tile, x, wg, wu, h_ptr, gu_ptr, bg_ptr, bu_ptr, M, N, K,
                s_xm, s_xk, s_gk, s_gn, s_uk, s_un, s_hm, s_hn,
                ACTIVATION: tl.constexpr, HAS_BG: tl.constexpr, HAS_BU: tl.constexpr, STORE_GU: tl.constexpr,
                PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, TMA: tl.constexpr,
                X_T: tl.constexpr, G_T: tl.constexpr, U_T: tl.constexpr):
    """One output tile of h."""
    _, row, col = tile_position(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    if TMA:
        g, u = _gated_dots_descriptors(x, wg, wu, row, col, K, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, X_T, G_T, U_T)
    else:
        g, u = _gated_dots_pointers(x, wg, wu, row, col, M, N, K, s_xm, s_xk, s_gk, s_gn, s_uk, s_un,
                                    BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PRECISION)
    _gated_store(g, u, row + tl.arange(0, BLOCK_M), col + tl.arange(0, BLOCK_N), M, N, h_ptr, gu_ptr, bg_ptr,
                 bu_ptr, s_hm, s_hn, ACTIVATION, HAS_BG, HAS_BU, STORE_GU)


@triton.jit
def _gated_kernel(x, wg, wu, h_ptr, gu_ptr, bg_ptr, bu_ptr, M, N, K,
                  s_xm, s_xk, s_gk, s_gn, s_uk, s_un, s_hm, s_hn,
                  ACTIVATION: tl.constexpr, HAS_BG: tl.constexpr, HAS_BU: tl.constexpr, STORE_GU: tl.constexpr,
                  PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, PERSISTENT: tl.constexpr, TMA: tl.constexpr,
                  X_T: tl.constexpr, G_T: tl.constexpr, U_T: tl.constexpr):
    """x, wg, wu: pointers, or tensor descriptors with TMA. Grid: (tiles,), or (programs,) with PERSISTENT, each
    program taking every programs-th tile."""
    if PERSISTENT:
        n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
            _gated_tile(tile, x, wg, wu, h_ptr, gu_ptr, bg_ptr, bu_ptr, M, N, K,
                        s_xm, s_xk, s_gk, s_gn, s_uk, s_un, s_hm, s_hn, ACTIVATION, HAS_BG, HAS_BU, STORE_GU,
                        PRECISION, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EVEN_K, TMA, X_T, G_T, U_T)
    else:
        _gated_tile(tl.program_id(0), x, wg, wu, h_ptr, gu_ptr, bg_ptr, bu_ptr, M, N, K,
                    s_xm, s_xk, s_gk, s_gn, s_uk, s_un, s_hm, s_hn, ACTIVATION, HAS_BG, HAS_BU, STORE_GU,
                    PRECISION, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EVEN_K, TMA, X_T, G_T, U_T)


@triton.jit
def activation_slope(z, ACTIVATION: tl.constexpr):
    """d activation(z) / dz for float32 z, torch's derivatives (ACTIVATIONS' numbering): relu's is 0 at 0; gelu_tanh's
    z * sigmoid(2u) differentiated, its 1 - tanh(u)^2 written 4 s (1 - s) for s = sigmoid(2u), which keeps its
    precision where tanh(u) is near 1."""
    if ACTIVATION == 1:
        d = tl.where(z > 0.0, 1.0, 0.0)
    elif ACTIVATION == 2:
        d = 0.5 * (1.0 + tl.erf(z * 0.7071067811865476)) + z * 0.3989422804014327 * tl.exp(-0.5 * z * z)
    elif ACTIVATION == 3:
        s = 1.0 / (1.0 + tl.exp(-1.5957691216057308 * (z + 0.044715 * z * z * z)))
        d = s + 1.5957691216057308 * z * s * (1.0 - s) * (1.0 + 0.134145 * z * z)
    elif ACTIVATION == 4:
        s = 1.0 / (1.0 + tl.exp(-z))
        d = s * (1.0 + z * (1.0 - s))
    else:
        d = tl.full(z.shape, 1.0, tl.float32)
    return d


@triton.jit
def _gated_backward_kernel(dh_ptr, gu_ptr, dgu_ptr, N, s_dm, s_dn, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr):
    """Row program_id(0), columns [program_id(1) * BLOCK, ...): dg = dh * u * act'(g) and du = dh * act(g) from
    the saved (M, 2N) [g | u], in float32, into the (M, 2N) [dg | du], each rounded once."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < N
    dh = tl.load(dh_ptr + row * s_dm + cols.to(tl.int64) * s_dn, mask=ok, other=0.0).to(tl.float32)
    offs = row * (2 * N) + cols
    g = tl.load(gu_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + offs + N, mask=ok, other=0.0).to(tl.float32)
    tl.store(dgu_ptr + offs, (dh * u * activation_slope(g, ACTIVATION)).to(dgu_ptr.dtype.element_ty), mask=ok)
    tl.store(dgu_ptr + offs + N, (dh * activate(g, ACTIVATION)).to(dgu_ptr.dtype.element_ty), mask=ok)


SOURCES = (_gated_dots_pointers, _gated_dots_descriptors, _gated_store, _gated_tile, _gated_kernel, activation_slope,
           _gated_backward_kernel, BACKWARD_BLOCK)
"""The @triton.jit functions (and constant) of this module: with gemm.SOURCES (the helpers they call, and the down
projection's kernel), the source hash of gated_mlp's spec."""


@dataclasses.dataclass(frozen=True)
class Launch:
    """Everything a gated GEMM call derives from its shapes, strides, dtype, epilogue and config: built once per
    kind of call (`plan`), so a repeated call only allocates, checks three addresses and launches (`run`)."""

    config: dict
    empty: bool
    copies_weights: bool
    """Whether the weights are multiplied as row-major (K, N) copies (float32 products on the FMA units)."""
    reads: tuple[_gemm.Described, _gemm.Described, _gemm.Described] | None
    """How the TMA unit reads x, the gate's weight and the up projection's; None where pointers do."""
    grid: tuple[int, ...]
    args: tuple[int, ...]
    pointer_meta: dict
    descriptor_meta: dict


def plan(m: int, k: int, n: int, x_strides, wg_strides, wu_strides, h_strides, dtype: torch.dtype, config: dict, *,
         gate_bias: bool, up_bias: bool, store_gu: bool, activation: str) -> Launch:
    """The launch of h (m, n) = act(x @ wg.T + bg) * (x @ wu.T + bu) for x (m, k) and weights (n, k) of these
    strides in dtype, with one config."""
    # The (n, k) weights are read as their (k, n) transposes.
    g_strides, u_strides = (wg_strides[1], wg_strides[0]), (wu_strides[1], wu_strides[0])
    copies = any(_gemm.reads_row_major_copy(dtype, m, (0, *s)) for s in (g_strides, u_strides))
    if copies:
        g_strides = u_strides = (n, 1)
    block_m, block_n, block_k = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    reads = None
    if config["variant"].startswith("tma"):
        found = (
            _gemm.describe((1, m, k), (0, *x_strides), dtype, block_m, block_k),
            _gemm.describe((1, k, n), (0, *g_strides), dtype, block_k, block_n),
            _gemm.describe((1, k, n), (0, *u_strides), dtype, block_k, block_n),
        )
        reads = None if None in found else found
    persistent = config["variant"].endswith("persistent")
    n_tiles = cdiv(m, block_m) * cdiv(n, block_n)
    meta = dict(ACTIVATION=_gemm.ACTIVATIONS[activation], HAS_BG=gate_bias, HAS_BU=up_bias, STORE_GU=store_gu,
                PRECISION=_gemm.precision(dtype), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                GROUP_M=config["GROUP_M"], EVEN_K=k % block_k == 0, PERSISTENT=persistent, TMA=False,
                X_T=False, G_T=False, U_T=False, num_warps=config["num_warps"], num_stages=config["num_stages"])
    descriptor_meta = meta
    if reads is not None:
        descriptor_meta = dict(meta, TMA=True, X_T=reads[0].transposed, G_T=reads[1].transposed,
                               U_T=reads[2].transposed)
    return Launch(
        config=config, empty=m * n == 0, copies_weights=copies, reads=reads,
        grid=(min(n_tiles, _gemm.sm_count()),) if persistent else (n_tiles,),
        args=(m, n, k, *x_strides, *g_strides, *u_strides, *h_strides),
        pointer_meta=meta, descriptor_meta=descriptor_meta,
    )


def run(launch: Launch, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, h: torch.Tensor, *,
        b_gate: torch.Tensor | None = None, b_up: torch.Tensor | None = None, gu: torch.Tensor | None = None) -> None:
    """Launch a plan on tensors of its shapes and strides (gu: a contiguous (m, 2n), where the plan stores it)."""
    if launch.empty:
        return
    if launch.copies_weights:
        w_gate, w_up = w_gate.t().contiguous(), w_up.t().contiguous()
    operands, meta = (x, w_gate, w_up), launch.pointer_meta
    if launch.reads is not None and not any(t.data_ptr() % _DESCRIPTOR_ALIGNMENT for t in operands):
        operands, meta = tuple(r.at(t) for r, t in zip(launch.reads, operands)), launch.descriptor_meta
    _gated_kernel[launch.grid](*operands, h, h if gu is None else gu, h if b_gate is None else b_gate,
                               h if b_up is None else b_up, *launch.args, **meta)
