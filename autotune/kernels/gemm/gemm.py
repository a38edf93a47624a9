"""The GEMM kernels behind matmul, linear and mlp: y = activation(a @ b + bias), the bias and the activation
applied to the float32 tile in registers before its one rounding to the output dtype.

One Triton kernel, four variants: a program per output tile ("tiled") or one program per SM looping over
tiles ("persistent"), each reading its operand blocks through pointers or through tensor-memory-accelerator
descriptors ("tma", "tma_persistent"). The grid variants may split K ("split-K"): each split writes a
float32 partial tile to a workspace, and a second kernel adds the partials in split order (the sum is
the same on every run, unlike atomics) and applies the bias and the activation.

Products accumulate in float32; float32 inputs are multiplied in IEEE float32 (input_precision="ieee", no
TF32), as torch does with torch.backends.cuda.matmul.allow_tf32 off, its default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
import triton
import triton.language as tl

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # an older Triton, without host descriptors: tma_available() is False, no "tma" config runs
    TensorDescriptor = None

from autotune import gpu
from autotune.kernels.common.grid import cdiv

ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
"""The fused activations, as torch names them: relu, gelu (exact, with erf), gelu with approximate="tanh", silu."""
INTERPRETER_SMS = 2
"""The interpreter has no SMs; two persistent programs still make each loop over several tiles."""
SUM_BLOCK = 64
"""Output tile of the split-K sum: it only streams the partials."""
_DESCRIPTOR_ALIGNMENT = 16
FMA_ROW_MAJOR_MIN_M = 512
"""In IEEE float32 (products on the FMA units) a b operand stored along K (unit stride down its columns, as
linear's w.T) runs 2-3x slower than a row-major one (docs/kernels.md, the matmul family's float32 notes).
From this many rows of a on, `gemm` multiplies a row-major copy of b instead (`reads_row_major_copy`): the copy
reads and writes b once, about 2% of an 8192-row product's time, less than 25% of the product at 512 rows."""


@triton.jit
def activate(z, ACTIVATION: tl.constexpr):
    """ACTIVATIONS[name](z) for float32 z, torch's formulas; gelu_tanh's 0.5 z (1 + tanh(u)) written as
    z / (1 + exp(-2u)) = z * sigmoid(2u), the same function. Where exp overflows to inf, 1 / inf is the 0
    that the sigmoid tends to."""
    if ACTIVATION == 1:
        y = tl.where(z < 0.0, 0.0, z)  # NaN stays NaN, as in torch.relu
    elif ACTIVATION == 2:
        y = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
    elif ACTIVATION == 3:
        u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        y = z / (1.0 + tl.exp(-2.0 * u))
    elif ACTIVATION == 4:
        y = z / (1.0 + tl.exp(-z))
    else:
        y = z
    return y


@triton.jit
def tile_position(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(batch, first row, first column) of output tile number `tile`. Within a matrix the tiles run down
    GROUP_M rows of tiles before moving right, so programs running together share operand blocks in L2."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_matrix = tiles_m * tiles_n
    batch = tile // per_matrix
    t = tile % per_matrix
    per_group = GROUP_M * tiles_n
    first_m = (t // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (t % per_group) % group_rows
    pid_n = (t % per_group) // group_rows
    return batch, pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def store_tile(acc, rows, cols, M, N, y_ptr, z_ptr, bias_ptr, s_ym, s_yn,
               ACTIVATION: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_PRE: tl.constexpr):
    """The epilogue: bias and activation on the float32 tile, one rounding, a masked store into the matrix
    at y_ptr (and the pre-activation into the one at z_ptr, with y's strides, with STORE_PRE)."""
    col_ok = cols < N
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    mask = (rows[:, None] < M) & col_ok[None, :]
    offs = rows.to(tl.int64)[:, None] * s_ym + cols.to(tl.int64)[None, :] * s_yn
    if STORE_PRE:
        tl.store(z_ptr + offs, acc.to(z_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + offs, activate(acc, ACTIVATION).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def accumulate(acc, part, a, b, block, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    """(acc, part) after the products of a @ b, the block-th block of K. Half types chain every product into
    acc on the tensor cores (part stays unused). IEEE float32 products run on the FMA units, where one chain
    of K products ran past the gate's error budget (K = 18503 and 22635 on the H100): they chain into part,
    which is added into acc after every 256 products, so a long K adds K / 256 partial sums in one chain.
    (`acc += tl.dot(a, b)` does not do it: Triton folds the add back into the product.)"""
    if PRECISION == "ieee":
        part = tl.dot(a, b, part, input_precision=PRECISION)
        if ((block + 1) * BLOCK_K) % 256 == 0:
            acc += part
            part = tl.zeros_like(part)
    else:
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    return acc, part


@triton.jit
def partial_sums(acc, part, PRECISION: tl.constexpr):
    """The product from accumulate's two sums."""
    if PRECISION == "ieee":
        acc += part
    return acc


@triton.jit
def dot_pointers(a_ptr, b_ptr, row, col, M, N, K, k_lo, k_hi, s_am, s_ak, s_bk, s_bn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                 PRECISION: tl.constexpr):
    """The float32 (BLOCK_M, BLOCK_N) product of rows [row, row + BLOCK_M) of a and columns [col, ...) of b
    over k in [k_lo, k_hi), k_lo a multiple of BLOCK_K, blocks read through pointers (any strides).
    Masked lanes load 0, which adds nothing to a product."""
    rows = row + tl.arange(0, BLOCK_M)
    cols = col + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    # 64-bit offsets: row * stride passes 2**31 in large matrices.
    a_ptrs = a_ptr + rows.to(tl.int64)[:, None] * s_am + (k_lo + ks).to(tl.int64)[None, :] * s_ak
    b_ptrs = b_ptr + (k_lo + ks).to(tl.int64)[:, None] * s_bk + cols.to(tl.int64)[None, :] * s_bn
    a_step = tl.full((BLOCK_K,), BLOCK_K, tl.int64)[None, :] * s_ak
    b_step = tl.full((BLOCK_K,), BLOCK_K, tl.int64)[:, None] * s_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    part = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            a = tl.load(a_ptrs, mask=row_ok[:, None] & (ks[None, :] < K - k), other=0.0)
            b = tl.load(b_ptrs, mask=(ks[:, None] < K - k) & col_ok[None, :], other=0.0)
        acc, part = accumulate(acc, part, a, b, (k - k_lo) // BLOCK_K, BLOCK_K, PRECISION)
        a_ptrs += a_step
        b_ptrs += b_step
    return partial_sums(acc, part, PRECISION)


@triton.jit
def descriptor_block(desc, batch, row, col, ROWS: tl.constexpr, COLS: tl.constexpr,
                     TRANSPOSED: tl.constexpr, BATCHED: tl.constexpr):
    """The (ROWS, COLS) block at (row, col) of a matrix read through a tensor descriptor: of matrix `batch`
    of a 3-D descriptor when BATCHED; through a descriptor of the transpose (a (COLS, ROWS) block,
    transposed in registers) when TRANSPOSED. Out-of-bounds elements read 0."""
    if TRANSPOSED:
        if BATCHED:
            block = desc.load([batch, col, row]).reshape(COLS, ROWS)
        else:
            block = desc.load([col, row])
        block = block.T
    else:
        if BATCHED:
            block = desc.load([batch, row, col]).reshape(ROWS, COLS)
        else:
            block = desc.load([row, col])
    return block


@triton.jit
def _dot_descriptors(a_desc, b_desc, batch, row, col, k_lo, k_hi,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
                     A_T: tl.constexpr, B_T: tl.constexpr, A_BATCHED: tl.constexpr, B_BATCHED: tl.constexpr):
    """dot_pointers' product, the blocks read by the TMA unit; past K they read 0, so a split's last block
    needs no mask (every split but the last ends on a block boundary inside K)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    part = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        a = descriptor_block(a_desc, batch, row, k, BLOCK_M, BLOCK_K, A_T, A_BATCHED)
        b = descriptor_block(b_desc, batch, k, col, BLOCK_K, BLOCK_N, B_T, B_BATCHED)
        acc, part = accumulate(acc, part, a, b, (k - k_lo) // BLOCK_K, BLOCK_K, PRECISION)
    return partial_sums(acc, part, PRECISION)


@triton.jit
def _gemm_tile(tile, split, a, b, y_ptr, z_ptr, bias_ptr, ws_ptr, M, N, K, BATCH,
               s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_yb, s_ym, s_yn,
               ACTIVATION: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_PRE: tl.constexpr, PRECISION: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, TMA: tl.constexpr,
               A_T: tl.constexpr, B_T: tl.constexpr, A_BATCHED: tl.constexpr, B_BATCHED: tl.constexpr):
    """One output tile, or with SPLIT_K its split `split`: whole blocks of K, in equal runs per split."""
    batch, row, col = tile_position(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    k_lo = split * per_split
    k_hi = tl.minimum(K, k_lo + per_split)
    if TMA:
        acc = _dot_descriptors(a, b, batch, row, col, k_lo, k_hi, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION,
                               A_T, B_T, A_BATCHED, B_BATCHED)
    else:
        acc = dot_pointers(a + batch.to(tl.int64) * s_ab, b + batch.to(tl.int64) * s_bb, row, col, M, N, K, k_lo, k_hi,
                           s_am, s_ak, s_bk, s_bn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PRECISION)
    rows = row + tl.arange(0, BLOCK_M)
    cols = col + tl.arange(0, BLOCK_N)
    if SPLIT_K == 1:
        y_off = batch.to(tl.int64) * s_yb
        store_tile(acc, rows, cols, M, N, y_ptr + y_off, z_ptr + y_off, bias_ptr, s_ym, s_yn, ACTIVATION, HAS_BIAS, STORE_PRE)
    else:
        offs = ((split * BATCH + batch).to(tl.int64) * M + rows[:, None]) * N + cols[None, :]
        tl.store(ws_ptr + offs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def _gemm_kernel(a, b, y_ptr, z_ptr, bias_ptr, ws_ptr, M, N, K, BATCH,
                 s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_yb, s_ym, s_yn,
                 ACTIVATION: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_PRE: tl.constexpr, PRECISION: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, PERSISTENT: tl.constexpr, TMA: tl.constexpr,
                 A_T: tl.constexpr, B_T: tl.constexpr, A_BATCHED: tl.constexpr, B_BATCHED: tl.constexpr):
    """a, b: pointers, or tensor descriptors with TMA. Grid: (tiles, SPLIT_K), or (programs,) with
    PERSISTENT, each program taking every programs-th tile."""
    if PERSISTENT:
        n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) * BATCH
        for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
            _gemm_tile(tile, 0, a, b, y_ptr, z_ptr, bias_ptr, ws_ptr, M, N, K, BATCH,
                       s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_yb, s_ym, s_yn, ACTIVATION, HAS_BIAS, STORE_PRE, PRECISION,
                       BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, 1, EVEN_K, TMA, A_T, B_T, A_BATCHED, B_BATCHED)
    else:
        _gemm_tile(tl.program_id(0), tl.program_id(1), a, b, y_ptr, z_ptr, bias_ptr, ws_ptr, M, N, K, BATCH,
                   s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_yb, s_ym, s_yn, ACTIVATION, HAS_BIAS, STORE_PRE, PRECISION,
                   BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, EVEN_K, TMA, A_T, B_T, A_BATCHED, B_BATCHED)


@triton.jit
def _split_k_sum_kernel(ws_ptr, y_ptr, z_ptr, bias_ptr, M, N, BATCH, s_yb, s_ym, s_yn,
                        ACTIVATION: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_PRE: tl.constexpr,
                        SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    """The partial tiles of the SPLIT_K splits added in split order, then the epilogue."""
    batch, row, col = tile_position(tl.program_id(0), M, N, BLOCK, BLOCK, 1)
    rows = row + tl.arange(0, BLOCK)
    cols = col + tl.arange(0, BLOCK)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    acc = tl.zeros((BLOCK, BLOCK), tl.float32)
    for split in tl.static_range(SPLIT_K):
        offs = ((split * BATCH + batch).to(tl.int64) * M + rows[:, None]) * N + cols[None, :]
        acc += tl.load(ws_ptr + offs, mask=mask, other=0.0)
    y_off = batch.to(tl.int64) * s_yb
    store_tile(acc, rows, cols, M, N, y_ptr + y_off, z_ptr + y_off, bias_ptr, s_ym, s_yn, ACTIVATION, HAS_BIAS, STORE_PRE)


SOURCES = (activate, tile_position, store_tile, accumulate, partial_sums, dot_pointers, descriptor_block, _dot_descriptors,
           _gemm_tile, _gemm_kernel, _split_k_sum_kernel, SUM_BLOCK)
"""Every @triton.jit function (and constant) the GEMM kernels run: the source hash of their specs."""


def sm_count() -> int:
    return gpu.current_gpu().sm_count or INTERPRETER_SMS


def precision(dtype: torch.dtype) -> str:
    """tl.dot's input_precision: IEEE float32 products for float32 (no TF32); the default for half types."""
    return "ieee" if dtype == torch.float32 else "tf32"


@dataclasses.dataclass(frozen=True)
class Described:
    """How the TMA unit reads one (B, R, C) operand: the shape, strides and block of the matrix a descriptor
    describes (the transpose's where `transposed`; with the batch dim in front where `batched`)."""

    shape: list[int]
    strides: list[int]
    block: list[int]
    transposed: bool
    batched: bool
    template: dict = dataclasses.field(repr=False, compare=False)
    """The fields of a descriptor of this layout, checked once by TensorDescriptor (at address 0)."""

    @classmethod
    def of(cls, shape: list[int], strides: list[int], block: list[int], transposed: bool, batched: bool,
           dtype: torch.dtype) -> Described:
        checked = TensorDescriptor(torch.empty(0, dtype=dtype), shape, strides, block)
        return cls(shape, strides, block, transposed, batched, vars(checked))

    def at(self, base: torch.Tensor) -> TensorDescriptor:
        """A host tensor descriptor of this layout at base's address, the operand's first element (base's own
        shape and strides are not read). TensorDescriptor's checks ran on the template, and `run` checks the
        address: the per-call copy skips them (about 5 us of host time each)."""
        desc = object.__new__(TensorDescriptor)
        vars(desc).update(self.template, base=base)
        return desc


def describe(shape: Sequence[int], strides: Sequence[int], dtype: torch.dtype, block_rows: int,
             block_cols: int) -> Described | None:
    """How the TMA unit reads (block_rows, block_cols) blocks of a (B, R, C) operand of these shape and strides,
    or None where it cannot (unit stride in neither of the last two dims, a stride off 16 bytes, an empty
    dim). A matrix with unit row stride is described through its transpose; a batch of one matrix, or one
    broadcast (batch stride 0), through a 2-D descriptor. Its address is checked per call (`run`)."""
    batch, s_batch = shape[0], strides[0]
    dims, steps, blocks = list(shape[1:]), list(strides[1:]), [block_rows, block_cols]
    transposed = steps[1] != 1
    if transposed:
        dims.reverse()
        steps.reverse()
        blocks.reverse()
    if steps[1] != 1 or 0 in dims:
        return None
    batched = batch > 1 and s_batch != 0
    if batched:
        dims, steps, blocks = [batch, *dims], [s_batch, *steps], [1, *blocks]
    if any(s * dtype.itemsize % _DESCRIPTOR_ALIGNMENT for s in steps[:-1]):
        return None
    return Described.of(dims, steps, blocks, transposed, batched, dtype)


def reads_row_major_copy(dtype: torch.dtype, m: int, b_strides: Sequence[int]) -> bool:
    """Whether gemm multiplies a row-major copy of b (B, K, N): IEEE float32 products (FMA units) read a b
    stored along K (unit stride down its columns, as linear's w.T) 2-3x slower than a row-major one, and from
    FMA_ROW_MAJOR_MIN_M rows of a on the copy costs less than that."""
    return precision(dtype) == "ieee" and m >= FMA_ROW_MAJOR_MIN_M and b_strides[1] == 1 and b_strides[2] != 1


@dataclasses.dataclass(frozen=True)
class Launch:
    """Everything gemm derives from a call's shapes, strides, dtype, epilogue and config: built once per kind
    of call (`plan`), so a repeated call only allocates, checks two addresses and launches (`run`)."""

    config: dict
    empty: bool
    b_copy: tuple[tuple[int, ...], tuple[int, ...]] | None
    """(shape, strides) of the view of b to copy row-major before the product, or None."""
    a_read: Described | None
    b_read: Described | None
    """How the TMA unit reads each operand; both None where the variant reads through pointers."""
    grid: tuple[int, ...]
    args: tuple[int, ...]
    """The kernel's arguments after the six tensors: sizes and strides."""
    pointer_meta: dict
    descriptor_meta: dict
    """The constexprs and launch options, reading through pointers or through descriptors."""
    workspace: tuple[int, ...] | None
    """The split-K partials' float32 shape, or None."""
    sum_grid: tuple[int, ...]
    sum_args: tuple[int, ...]
    sum_meta: dict


def plan(a_shape: Sequence[int], a_strides: Sequence[int], b_shape: Sequence[int], b_strides: Sequence[int],
         y_strides: Sequence[int], dtype: torch.dtype, config: dict, *, bias: bool = False, pre: bool = False,
         activation: str = "none") -> Launch:
    """The launch of y = activation(a @ b + bias) (with the pre-activation stored where `pre`) for a (B, M, K),
    b (B, K, N) and y (B, M, N) of these shapes and strides in dtype, with one config (see `gemm`)."""
    batch, m, k = a_shape
    n = b_shape[2]
    b_strides = tuple(b_strides)
    b_copy = None
    if reads_row_major_copy(dtype, m, b_strides):
        copies = batch if batch > 1 and b_strides[0] != 0 else 1
        b_copy = ((copies, k, n), b_strides)
        b_strides = (k * n if copies > 1 else 0, n, 1)
    block_m, block_n, block_k, split = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["SPLIT_K"]
    variant = config["variant"]
    persistent = variant.endswith("persistent")
    if persistent:
        split = 1
    a_read = b_read = None
    if variant.startswith("tma"):
        a_read = describe(a_shape, a_strides, dtype, block_m, block_k)
        b_read = describe((batch, k, n), b_strides, dtype, block_k, block_n)
        if a_read is None or b_read is None:
            a_read = b_read = None
    n_tiles = cdiv(m, block_m) * cdiv(n, block_n) * batch
    epilogue = dict(ACTIVATION=ACTIVATIONS[activation], HAS_BIAS=bias, STORE_PRE=pre)
    meta = dict(**epilogue, PRECISION=precision(dtype), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                GROUP_M=config["GROUP_M"], SPLIT_K=split, EVEN_K=k % block_k == 0, PERSISTENT=persistent, TMA=False,
                A_T=False, B_T=False, A_BATCHED=False, B_BATCHED=False,
                num_warps=config["num_warps"], num_stages=config["num_stages"])
    descriptor_meta = meta
    if a_read is not None:
        descriptor_meta = dict(meta, TMA=True, A_T=a_read.transposed, B_T=b_read.transposed,
                               A_BATCHED=a_read.batched, B_BATCHED=b_read.batched)
    return Launch(
        config=config, empty=m * n * batch == 0, b_copy=b_copy, a_read=a_read, b_read=b_read,
        grid=(min(n_tiles, sm_count()),) if persistent else (n_tiles, split),
        args=(m, n, k, batch, *a_strides, *b_strides, *y_strides),
        pointer_meta=meta, descriptor_meta=descriptor_meta,
        workspace=(split, batch, m, n) if split > 1 else None,
        sum_grid=(cdiv(m, SUM_BLOCK) * cdiv(n, SUM_BLOCK) * batch,), sum_args=(m, n, batch, *y_strides),
        sum_meta=dict(**epilogue, SPLIT_K=split, BLOCK=SUM_BLOCK, num_warps=4),
    )


def run(launch: Launch, a: torch.Tensor, b: torch.Tensor, y: torch.Tensor, *, bias: torch.Tensor | None = None,
        z: torch.Tensor | None = None) -> None:
    """Launch a plan on tensors at the addresses of a, b and y (and z, bias): each tensor's first element,
    its shape and strides being the plan's (a view's own are not read)."""
    if launch.empty:
        return
    if launch.b_copy is not None:
        b = b.as_strided(*launch.b_copy).contiguous()
    a_arg, b_arg, meta = a, b, launch.pointer_meta
    if launch.a_read is not None and not (a.data_ptr() % _DESCRIPTOR_ALIGNMENT or b.data_ptr() % _DESCRIPTOR_ALIGNMENT):
        a_arg, b_arg, meta = launch.a_read.at(a), launch.b_read.at(b), launch.descriptor_meta
    z = y if z is None else z
    bias = y if bias is None else bias
    if launch.workspace is None:
        _gemm_kernel[launch.grid](a_arg, b_arg, y, z, bias, y, *launch.args, **meta)
        return
    ws = torch.empty(launch.workspace, dtype=torch.float32, device=y.device)
    _gemm_kernel[launch.grid](a_arg, b_arg, y, z, bias, ws, *launch.args, **meta)
    _split_k_sum_kernel[launch.sum_grid](ws, y, z, bias, *launch.sum_args, **launch.sum_meta)


def gemm(a: torch.Tensor, b: torch.Tensor, y: torch.Tensor, config: dict, *, bias: torch.Tensor | None = None,
         z: torch.Tensor | None = None, activation: str = "none") -> None:
    """y = activation(a @ b + bias) with one config, for a (B, M, K), b (B, K, N), y (B, M, N) of one dtype,
    any strides (a batch stride of 0 broadcasts one matrix); bias (N,) contiguous. With z (y's shape and
    strides), also z = a @ b + bias, the pre-activation. A "tma" variant reads operands the TMA unit
    cannot (see `describe`) through pointers, with the same tiles. Plans the launch on every call: a caller
    that repeats calls keeps the `plan` and calls `run`."""
    launch = plan(a.shape, a.stride(), b.shape, b.stride(), y.stride(), a.dtype, config, bias=bias is not None,
                  pre=z is not None, activation=activation)
    run(launch, a, b, y, bias=bias, z=z)
