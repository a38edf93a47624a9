"""Pieces the attention kernels share: the compute dtype (float64 for float32 inputs), the matmul (also for
bfloat16 under the interpreter), tile loads through pointers or tensor descriptors, and the split of a key
range into unmasked and masked blocks.

float32 inputs are computed in float64 (UPCAST): attention outputs are averages whose small elements are
what is left after cancellation, and float32 scores and sums leave rounding there that the gate, comparing
element by element, would hold against a kernel as often as against torch. Half inputs compute as
FlashAttention does: float32 scores and sums, the fast base-2 exponential, tensor-core matmuls.
"""

from __future__ import annotations

import struct

import torch
import triton
import triton.language as tl

from autotune.kernels.common.rounding import INTERPRETING


def unit_stride(t: torch.Tensor) -> torch.Tensor:
    """t with elements of a head's row adjacent, as the kernels address them (a copy only where not)."""
    return t if t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()


def upcast(dtype: torch.dtype) -> bool:
    """Whether inputs of dtype are computed in float64."""
    return dtype == torch.float32


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels compute in, and keep the log-sum-exp and partial results in, for inputs of
    dtype. A float32 log-sum-exp of large logits (|lse| ~ 500) would be off by 3e-5 for float32 inputs,
    and every probability recomputed from it."""
    return torch.float64 if upcast(dtype) else torch.float32


def split_float(x: float) -> tuple[float, float]:
    """x as hi + lo, two float32 numbers (a Triton kernel takes Python floats as float32)."""
    hi = struct.unpack("f", struct.pack("f", x))[0]
    return hi, x - hi


def score_multiplier(scale: float, dtype: torch.dtype) -> tuple[float, float]:
    """What scores are multiplied by, as split_float: the scale, times log2(e) where the kernels
    exponentiate in base 2 (half inputs)."""
    return split_float(scale if upcast(dtype) else scale * 1.4426950408889634)


LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


# The helpers below return once, from if/else branches on constexprs: Triton (3.6) still compiles the
# statements after a return taken in a constexpr branch, and those may not type-check on the other path.


@triton.jit
def scalar(hi, lo, UPCAST: tl.constexpr):
    """A number passed as two float32s: their float64 sum with UPCAST, else hi."""
    if UPCAST:
        x = tl.cast(hi, tl.float64) + tl.cast(lo, tl.float64)
    else:
        x = hi
    return x


@triton.jit
def widen(x, UPCAST: tl.constexpr):
    """x in the compute dtype: float64 with UPCAST, else as it is."""
    if UPCAST:
        y = x.to(tl.float64)
    else:
        y = x
    return y


@triton.jit
def exp_(x, UPCAST: tl.constexpr):
    """e**x in float64 with UPCAST; else 2**x (scores in log2 units), the fast hardware exponential."""
    if UPCAST:
        y = tl.exp(x)
    else:
        y = tl.exp2(x)
    return y


@triton.jit
def mma(a, b, acc):
    """acc + a @ b (acc None: a @ b), float32 for half operands, float64 for float64 ones. The interpreter
    has no bfloat16 matmul: there bfloat16 operands multiply in float32, where their products are exact,
    as on a tensor core."""
    if INTERPRETING and a.dtype == tl.bfloat16:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    elif a.dtype == tl.float64:  # Triton 3.6 takes out_dtype as float32 unless told, and rejects a float64 acc
        c = tl.dot(a, b, acc, out_dtype=tl.float64)
    else:
        c = tl.dot(a, b, acc)
    return c


@triton.jit
def load_rows(src, start, offs, stride, n_rows, offs_d, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
              MASK_ROWS: tl.constexpr, DESCRIPTOR: tl.constexpr):
    """Rows start + offs of an (n_rows, HEAD_DIM) matrix as a (len(offs), BLOCK_D) tile, 0 past its edges.
    src is the matrix's first element, or its tensor descriptor (which pads with 0 itself). Rows are only
    checked with MASK_ROWS: the caller knows when they all exist."""
    if DESCRIPTOR:
        tile = src.load([start, 0])
    else:
        rows = (start + offs).to(tl.int64)  # row * stride can pass 2**31
        ptrs = src + rows[:, None] * stride + offs_d[None, :]
        if MASK_ROWS:
            if HEAD_DIM < BLOCK_D:
                tile = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM), other=0.0)
            else:
                tile = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
        elif HEAD_DIM < BLOCK_D:
            tile = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
        else:
            tile = tl.load(ptrs)
    return tile


@triton.jit
def key_blocks(lo, hi, q_first, q_last, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, EDGES_ONLY: tl.constexpr):
    """The keys [lo, hi) (hi <= Nk) that queries q_first..q_last may see, as (mid, end): blocks of BLOCK_N
    from lo to mid need no mask (every key exists and, causal, precedes every query); blocks from mid to
    end do. Causal masks are aligned top-left, as sdpa's: query i sees keys 0..i. Without EDGES_ONLY every
    block is masked; blocks past the last query's keys are skipped either way."""
    end = hi
    if CAUSAL:
        end = tl.minimum(hi, q_last + 1)
    mid = lo
    if EDGES_ONLY:
        clean = hi
        if CAUSAL:
            clean = tl.minimum(hi, q_first + 1)
        mid = lo + tl.maximum(clean - lo, 0) // BLOCK_N * BLOCK_N
    return mid, end
