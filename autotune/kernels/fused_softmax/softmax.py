"""softmax: exp(x - max) / sum(exp(x - max)) along one dim, any rank, in one fused kernel."""

from __future__ import annotations

import operator

import torch
import triton
import triton.language as tl

from autotune import runtime
from autotune.kernels.common import checks as _checks
from autotune.kernels.common.grid import cdiv
from autotune.kernels.fused_softmax import softmax_backward
from autotune.kernels.fused_softmax.problems import (
    PRESETS,
    as_rows,
    bucket_edges,
    cost,
    make_inputs,
    parse_shape,
    problems,
    problems_for_config,
)
from autotune.search_spaces.softmax import SPACE, bucket
from autotune.spec import Inputs, KernelSpec


@triton.jit
def _softmax_single_kernel(
    x_ptr, out_ptr, n_rows, n_cols,
    x_row_stride, x_col_stride, out_row_stride, out_col_stride,
    BLOCK_SIZE: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr,
):
    """Whole rows in registers: one read, one write per element."""
    rows = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    cols = tl.arange(0, BLOCK_SIZE).to(tl.int64)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x_ptrs = x_ptr + rows[:, None] * x_row_stride + cols[None, :] * x_col_stride
    # -inf padding vanishes from the max and becomes exp(-inf) = 0 in the sum.
    x = tl.load(x_ptrs, mask=mask, other=float("-inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=1)[:, None])
    out = num * (1.0 / tl.sum(num, axis=1))[:, None]
    out_ptrs = out_ptr + rows[:, None] * out_row_stride + cols[None, :] * out_col_stride
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_online_kernel(
    x_ptr, out_ptr, n_rows, n_cols,
    x_row_stride, x_col_stride, out_row_stride, out_col_stride,
    BLOCK_SIZE: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr,
):
    """Rows of any length in BLOCK_SIZE chunks: a pass for the running max and sum, a pass to write.

    Each lane keeps its own running max and sum and the row's are combined once after the loop: a
    reduction per chunk would synchronize the program's warps on every iteration.
    """
    rows = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    row_mask = rows[:, None] < n_rows
    x_rows = x_ptr + rows[:, None] * x_row_stride
    out_rows = out_ptr + rows[:, None] * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE).to(tl.int64)
    lane_max = tl.full((ROWS_PER_PROGRAM, BLOCK_SIZE), float("-inf"), tl.float32)
    lane_sum = tl.zeros((ROWS_PER_PROGRAM, BLOCK_SIZE), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        c = start + cols
        mask = row_mask & (c[None, :] < n_cols)
        # Kept in L2 for the second pass: on the H100 this took 1024x131072 bf16 from 1.93 to 2.40 TB/s.
        x = tl.load(x_rows + c[None, :] * x_col_stride, mask=mask, other=float("-inf"), eviction_policy="evict_last")
        x = x.to(tl.float32)
        new_max = tl.maximum(lane_max, x)
        # While a lane has seen only -inf, shift by 0: exp(-inf - -inf) would be NaN and poison the sum.
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        lane_sum = lane_sum * tl.exp(lane_max - shift) + tl.exp(x - shift)
        lane_max = new_max
    row_max = tl.max(lane_max, axis=1)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)
    # A row of only -inf keeps max -inf and sum 0, so below it gives NaN, as torch does.
    inv_sum = 1.0 / tl.sum(lane_sum * tl.exp(lane_max - shift[:, None]), axis=1)
    for start in range(0, n_cols, BLOCK_SIZE):
        c = start + cols
        mask = row_mask & (c[None, :] < n_cols)
        x = tl.load(x_rows + c[None, :] * x_col_stride, mask=mask, other=float("-inf"), eviction_policy="evict_first")
        out = tl.exp(x.to(tl.float32) - row_max[:, None]) * inv_sum[:, None]
        tl.store(out_rows + c[None, :] * out_col_stride, out.to(out_ptr.dtype.element_ty), mask=mask)


_KERNELS = {"single": _softmax_single_kernel, "online": _softmax_online_kernel}


def _launch(x, out, n_rows: int, n_cols: int, x_strides: tuple, out_strides: tuple, config: dict) -> None:
    """Softmax of n_rows rows of n_cols elements, addressed by (row, column) strides, with one config."""
    rows_per_program = config["ROWS_PER_PROGRAM"]
    _KERNELS[config["variant"]][(cdiv(n_rows, rows_per_program),)](
        x, out, n_rows, n_cols, *x_strides, *out_strides,
        BLOCK_SIZE=config["BLOCK_SIZE"], ROWS_PER_PROGRAM=rows_per_program,
        num_warps=config["num_warps"], num_stages=config["num_stages"],
    )


def _launch_rows(x: torch.Tensor, out: torch.Tensor, config: dict) -> None:
    """Softmax of each row of the 2-D x into the 2-D out (any strides) with one config."""
    _launch(x, out, x.shape[0], x.shape[1], x.stride(), out.stride(), config)


def launch(inputs: Inputs, config: dict, out: torch.Tensor) -> torch.Tensor:
    """Softmax of inputs["x"] along inputs["dim"] into `out` (same shape, any layout) with one config."""
    x, dim = inputs["x"], inputs["dim"]
    if x.numel() == 0:
        return out
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])  # a view when strides allow, else a contiguous copy
    out_rows = as_rows(out, dim)
    if out_rows is not None:
        _launch_rows(rows, out_rows, config)
        return out
    # Through a copy of out, not fresh memory, so an element the kernel leaves unwritten keeps out's value.
    tmp = out.movedim(dim, -1).contiguous()
    _launch_rows(rows, tmp.view(rows.shape), config)
    out.movedim(dim, -1).copy_(tmp)
    return out


def reference(inputs: Inputs) -> torch.Tensor:
    return torch.softmax(inputs["x"].double(), inputs["dim"])


def baseline(inputs: Inputs) -> torch.Tensor:
    return torch.softmax(inputs["x"], inputs["dim"])


SPEC = KernelSpec(
    name="softmax",
    space=SPACE,
    launch=launch,
    reference=reference,
    baseline=baseline,
    problems=problems,
    problems_for_config=problems_for_config,
    make_inputs=make_inputs,
    bucket=bucket,
    cost=cost,
    presets=PRESETS,
    interpreter_presets=[parse_shape("8x300")],
    parse_shape=parse_shape,
    sources=(_softmax_single_kernel, _softmax_online_kernel),
    description="softmax along one dim (torch.softmax)",
    bucket_edges=bucket_edges,
    public=lambda inputs: softmax(inputs["x"], inputs["dim"]),
)

_TUNED = runtime.tuned(SPEC)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch.softmax(x, dim) for a float tensor, with the tuned config; the result has x's dtype.

    Differentiable: the backward is a tuned kernel of its own (`softmax_backward`) on the saved output, and
    where the backward itself records a graph (create_graph=True) PyTorch arithmetic, so that higher
    derivatives are right.
    """
    _checks.float_tensor("x", x)
    if type(dim) is bool:  # an int to operator.index, but not a dim to torch
        raise TypeError("dim must be an int, got bool")
    try:
        dim = operator.index(dim)
    except TypeError:
        raise TypeError(f"dim must be an int, got {type(dim).__name__}") from None
    rank = x.dim()
    span = max(rank, 1)  # like torch, a 0-d tensor takes dim 0 or -1
    if not -span <= dim < span:
        raise IndexError(f"dim={dim} is out of range for a tensor of rank {rank}: expected {-span} to {span - 1}")
    if x.requires_grad and torch.is_grad_enabled():
        return _Softmax.apply(x, dim)
    return _forward(x, dim)


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int) -> torch.Tensor:
        y = _forward(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (y,) = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph: torch ops, which autograd differentiates again (through y too: it is this
            # function's output, so its own backward is this one).
            y32, g32 = y.float(), grad.float()
            dx = y32 * (g32 - (g32 * y32).sum(ctx.dim, keepdim=True))
            return dx.to(y.dtype), None
        return softmax_backward.backward(y, grad, ctx.dim), None


def _forward(x: torch.Tensor, dim: int) -> torch.Tensor:
    rank = x.dim()
    if rank == 0:
        return _forward(x.reshape(1), 0).reshape(())
    dim %= rank
    if dim == rank - 1 and x.is_contiguous():  # the common case, kept free of views: rows of n at stride n
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        numel = x.numel()
        if numel:
            n = x.shape[-1]
            m = numel // n
            config = _TUNED.lookup(
                x.dtype, (m, n), lambda: bucket({"shape": [m, n]}), lambda: {"shape": list(x.shape), "dim": dim}
            )
            runtime.note_launch("softmax", config)
            _launch(x, out, m, n, (n, 1), (n, 1), config)
        return out
    last = dim == rank - 1
    moved = x if last else x.movedim(dim, -1)
    out = torch.empty_like(moved, memory_format=torch.contiguous_format)
    if out.numel():
        n = moved.shape[-1]
        rows = moved.reshape(-1, n)  # a view when strides allow (contiguous, 2-D dim=0, ...), else a copy
        m = rows.shape[0]
        config = _TUNED.lookup(
            x.dtype, (m, n), lambda: bucket({"shape": [m, n]}), lambda: {"shape": list(x.shape), "dim": dim}
        )
        runtime.note_launch("softmax", config)
        _launch_rows(rows, out.view(rows.shape), config)
    return out if last else out.movedim(-1, dim)
