"""softmax's backward: dx = y * (dy - sum(dy * y)) along one dim, from the forward's output y, in one kernel.

A row of y and dy is either held whole in registers ("single": one read of each, one write of dx) or streamed
in chunks twice ("online": a pass for the row's sum, kept in L2 for the pass that writes dx), as the forward's.
What `autotune.kernels.softmax`'s autograd launches, with the config tuned for the call's bucket.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune import runtime
from autotune.kernels.common.grid import cdiv
from autotune.kernels.fused_softmax import problems as forward_problems
from autotune.search_spaces.softmax import BACKWARD_SPACE, bucket, row_shape
from autotune.spec import Cost, Inputs, KernelSpec


@triton.jit
def _softmax_backward_single_kernel(
    y_ptr, dy_ptr, dx_ptr, n_rows, n_cols,
    y_row_stride, y_col_stride, dy_row_stride, dy_col_stride, dx_row_stride, dx_col_stride,
    ACC: tl.constexpr, BLOCK_SIZE: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr,
):
    """Whole rows in registers: one read of y and dy, one write of dx per element."""
    rows = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    cols = tl.arange(0, BLOCK_SIZE).to(tl.int64)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    # 0 padding adds nothing to the sum.
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :] * y_col_stride, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :] * dy_col_stride, mask=mask, other=0.0)
    y = y.to(ACC)
    dy = dy.to(ACC)
    dot = tl.sum(y * dy, axis=1)
    dx = y * (dy - dot[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :] * dx_col_stride, dx.to(dx_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _softmax_backward_online_kernel(
    y_ptr, dy_ptr, dx_ptr, n_rows, n_cols,
    y_row_stride, y_col_stride, dy_row_stride, dy_col_stride, dx_row_stride, dx_col_stride,
    ACC: tl.constexpr, BLOCK_SIZE: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr,
):
    """Rows of any length in BLOCK_SIZE chunks: a pass for sum(dy * y), a pass to write dx.

    Each lane keeps its own partial sum and the row's is formed once after the loop: a reduction per
    chunk would synchronize the program's warps on every iteration.
    """
    rows = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    row_mask = rows[:, None] < n_rows
    y_rows = y_ptr + rows[:, None] * y_row_stride
    dy_rows = dy_ptr + rows[:, None] * dy_row_stride
    dx_rows = dx_ptr + rows[:, None] * dx_row_stride
    cols = tl.arange(0, BLOCK_SIZE).to(tl.int64)
    lane_dot = tl.zeros((ROWS_PER_PROGRAM, BLOCK_SIZE), ACC)
    for start in range(0, n_cols, BLOCK_SIZE):
        c = start + cols
        mask = row_mask & (c[None, :] < n_cols)
        # Kept in L2 for the second pass (the forward's online kernel gained 24% from it on the H100).
        y = tl.load(y_rows + c[None, :] * y_col_stride, mask=mask, other=0.0, eviction_policy="evict_last")
        dy = tl.load(dy_rows + c[None, :] * dy_col_stride, mask=mask, other=0.0, eviction_policy="evict_last")
        lane_dot += y.to(ACC) * dy.to(ACC)
    dot = tl.sum(lane_dot, axis=1)
    for start in range(0, n_cols, BLOCK_SIZE):
        c = start + cols
        mask = row_mask & (c[None, :] < n_cols)
        y = tl.load(y_rows + c[None, :] * y_col_stride, mask=mask, other=0.0, eviction_policy="evict_first")
        dy = tl.load(dy_rows + c[None, :] * dy_col_stride, mask=mask, other=0.0, eviction_policy="evict_first")
        y = y.to(ACC)
        dx = y * (dy.to(ACC) - dot[:, None])
        tl.store(dx_rows + c[None, :] * dx_col_stride, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def accumulator(dtype: torch.dtype):
    """The dtype the kernels compute in. Where dy_i nearly equals the row's sum, dx_i is what is left of
    their difference, and the sum's float32 rounding is all of it: for float32 data that failed the gate
    (a single row of 513, 40x torch's error on the CPU), so float32 data computes in float64 (three float64
    operations per element, well under the memory's time on an H100). 16-bit data keeps float32: its own
    resolution is 2**13 times coarser."""
    return tl.float64 if dtype == torch.float32 else tl.float32


_KERNELS = {"single": _softmax_backward_single_kernel, "online": _softmax_backward_online_kernel}


def _launch(y, dy, dx, n_rows: int, n_cols: int, y_strides: tuple, dy_strides: tuple, dx_strides: tuple,
            config: dict) -> None:
    """dx of n_rows rows of n_cols elements, each tensor addressed by its (row, column) strides, with one config."""
    rows_per_program = config["ROWS_PER_PROGRAM"]
    _KERNELS[config["variant"]][(cdiv(n_rows, rows_per_program),)](
        y, dy, dx, n_rows, n_cols, *y_strides, *dy_strides, *dx_strides, ACC=accumulator(y.dtype),
        BLOCK_SIZE=config["BLOCK_SIZE"], ROWS_PER_PROGRAM=rows_per_program,
        num_warps=config["num_warps"], num_stages=config["num_stages"],
    )


def _launch_rows(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, config: dict) -> None:
    """dx of 2-D rows (any strides, dx's included) with one config."""
    _launch(y, dy, dx, y.shape[0], y.shape[1], y.stride(), dy.stride(), dx.stride(), config)


def _rows(t: torch.Tensor, dim: int) -> torch.Tensor:
    """t with dim moved last as (rows, N): a view where strides allow, else a contiguous copy."""
    moved = t.movedim(dim, -1)
    return moved.reshape(-1, moved.shape[-1])


def launch(inputs: Inputs, config: dict, out: torch.Tensor) -> torch.Tensor:
    """dx of inputs["y"], inputs["dy"] along inputs["dim"] into `out` (same shape, any layout) with one config."""
    y, dy, dim = inputs["y"], inputs["dy"], inputs["dim"]
    if y.numel() == 0:
        return out
    out_rows = forward_problems.as_rows(out, dim)
    if out_rows is not None:
        _launch_rows(_rows(y, dim), _rows(dy, dim), out_rows, config)
        return out
    # Through a copy of out, not fresh memory, so an element the kernel leaves unwritten keeps out's value.
    tmp = out.movedim(dim, -1).contiguous()
    _launch_rows(_rows(y, dim), _rows(dy, dim), tmp.view(-1, tmp.shape[-1]), config)
    out.movedim(dim, -1).copy_(tmp)
    return out


def reference(inputs: Inputs) -> torch.Tensor:
    y, dy = inputs["y"].double(), inputs["dy"].double()
    return y * (dy - (dy * y).sum(inputs["dim"], keepdim=True))


def baseline(inputs: Inputs) -> torch.Tensor:
    """What torch.softmax's autograd runs: aten's softmax backward in the working dtype."""
    y = inputs["y"]
    return torch.ops.aten._softmax_backward_data(inputs["dy"], y, inputs["dim"] % max(y.dim(), 1), y.dtype)


def make_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    """y = softmax(x) of the forward's problem (x's -inf patterns, magnitudes and layout), rounded to dtype,
    and dy: normal values in the same layout."""
    dim = problem.get("dim", -1)
    y = forward_problems.make_inputs(problem, dtype, device, seed)["x"]
    if y.numel():
        y.copy_(torch.softmax(y.double(), dim))  # in place: y keeps x's layout
    dy = forward_problems.make_inputs({**problem, "neg_inf": "none", "magnitude": 1.0}, dtype, device, seed + 1)["x"]
    return {"y": y, "dy": dy, "dim": dim}


def cost(problem: dict, dtype: torch.dtype) -> Cost:
    """Reads y and dy, writes dx."""
    rows, n = row_shape(problem)
    numel = rows * n
    return Cost(flops=4 * numel, bytes=3 * numel * dtype.itemsize)


def backward(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    """dx = y * (dy - sum(dy * y, dim)) with the tuned config, for y = softmax(x, dim) and dy of y's shape;
    dx has y's dtype. The autograd backward of `autotune.kernels.softmax` (dim already checked there)."""
    if dy.dtype != y.dtype:
        dy = dy.to(y.dtype)
    rank = y.dim()
    if rank == 0:
        return backward(y.reshape(1), dy.reshape(1), 0).reshape(())
    dim %= rank
    last = dim == rank - 1
    if last and y.is_contiguous() and dy.is_contiguous():  # the common case, kept free of views
        dx = torch.empty_like(y, memory_format=torch.contiguous_format)
        numel = y.numel()
        if numel:
            n = y.shape[-1]
            m = numel // n
            config = _config(y, m, n, dim)
            _launch(y, dy, dx, m, n, (n, 1), (n, 1), (n, 1), config)
        return dx
    y_moved = y if last else y.movedim(dim, -1)
    dx = torch.empty_like(y_moved, memory_format=torch.contiguous_format)
    if dx.numel():
        n = y_moved.shape[-1]
        y_rows = y_moved.reshape(-1, n)  # a view where strides allow, else a copy
        dy_rows = (dy if last else dy.movedim(dim, -1)).reshape(-1, n)
        m = y_rows.shape[0]
        _launch_rows(y_rows, dy_rows, dx.view(m, n), _config(y, m, n, dim))
    return dx if last else dx.movedim(-1, dim)


def _config(y: torch.Tensor, m: int, n: int, dim: int) -> dict:
    config = _TUNED.lookup(y.dtype, (m, n), lambda: bucket({"shape": [m, n]}),
                           lambda: {"shape": list(y.shape), "dim": dim})
    runtime.note_launch(SPEC.name, config)
    return config


SPEC = KernelSpec(
    name="softmax_backward",
    space=BACKWARD_SPACE,
    launch=launch,
    reference=reference,
    baseline=baseline,
    problems=forward_problems.problems,
    problems_for_config=lambda config, dtype, max_numel: forward_problems.problems_for_config(
        config, dtype, max_numel, space=BACKWARD_SPACE),
    make_inputs=make_inputs,
    bucket=bucket,
    cost=cost,
    # Issue 39's shapes first (a device call searches presets in order), then the forward's.
    presets=[*(forward_problems.parse_shape(s) for s in ("8192x4096", "16384x8192")), *forward_problems.PRESETS],
    interpreter_presets=[forward_problems.parse_shape("8x300")],
    parse_shape=forward_problems.parse_shape,
    sources=(_softmax_backward_single_kernel, _softmax_backward_online_kernel, accumulator),
    description="softmax backward: dx = y * (dy - sum(dy * y)) from the forward's output y",
    bucket_edges=forward_problems.bucket_edges,
    public=lambda inputs: backward(inputs["y"], inputs["dy"], inputs["dim"]),
)

_TUNED = runtime.tuned(SPEC)
