"""softmax: exp(x - max) / sum(exp(x - max)) along one dim, any rank, in one fused kernel."""

from __future__ import annotations

import operator

import torch
import triton
import triton.language as tl
from hypothesis import strategies as st

from autotune import runtime
from autotune.kernels import _checks
from autotune.kernels._grid import cdiv
from autotune.search_spaces.softmax import SPACE, bucket, row_shape
from autotune.spec import Cost, Inputs, KernelSpec, parse_sizes
from autotune.strategies import PROBE_ROWS, magnitudes, next_pow2, shapes, sizes_in_classes, steered_classes


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


def _as_rows(t: torch.Tensor, dim: int) -> torch.Tensor | None:
    """t with dim moved last, viewed as (rows, N) without a copy; None where the layout does not allow it."""
    moved = t.movedim(dim, -1)
    try:
        return moved.view(-1, moved.shape[-1])
    except RuntimeError:
        return None


def launch(inputs: Inputs, config: dict, out: torch.Tensor) -> torch.Tensor:
    """Softmax of inputs["x"] along inputs["dim"] into `out` (same shape, any layout) with one config."""
    x, dim = inputs["x"], inputs["dim"]
    if x.numel() == 0:
        return out
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])  # a view when strides allow, else a contiguous copy
    out_rows = _as_rows(out, dim)
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


LAYOUTS = ("contiguous", "transposed", "sliced")
NEG_INF = ("none", "some", "row", "prefix")
"""-inf in the input: none; at about 10% of positions; one whole row; the first half of every row
(a padding mask: a chunked kernel sees whole blocks of -inf before any finite value)."""


def problems(max_numel: int) -> st.SearchStrategy[dict]:
    return shapes(1, 4, max_numel, allow_empty=True).flatmap(
        lambda shape: st.fixed_dictionaries(
            {
                "shape": st.just(shape),
                "dim": st.integers(-len(shape), len(shape) - 1),
                "layout": st.sampled_from(LAYOUTS),
                "magnitude": magnitudes(),
                "neg_inf": st.sampled_from(NEG_INF),
            }
        )
    )


def problems_for_config(config: dict, dtype: torch.dtype, max_numel: int) -> st.SearchStrategy[dict]:
    """`problems` with row lengths in the power-of-two classes the config runs on (SPACE's constraints
    depend on the row length only through its class: single holds one class, online all longer ones)."""
    classes = steered_classes(lambda n: SPACE.rejects(config, {"shape": [PROBE_ROWS, n], "dim": -1}) is None, max_numel)
    if classes is None:
        return problems(max_numel)
    return sizes_in_classes(classes, max_numel).flatmap(lambda n: _problems_with_rows_of(n, max_numel))


def _problems_with_rows_of(n: int, max_numel: int) -> st.SearchStrategy[dict]:
    @st.composite
    def draw(d: st.DrawFn) -> dict:
        others = d(shapes(0, 3, max(1, max_numel // n), allow_empty=True))
        at = d(st.integers(0, len(others)))
        shape = others[:at] + [n] + others[at:]
        return {
            "shape": shape,
            "dim": at - len(shape) if d(st.booleans()) else at,
            "layout": d(st.sampled_from(LAYOUTS)),
            "magnitude": d(magnitudes()),
            "neg_inf": d(st.sampled_from(NEG_INF)),
        }

    return draw()


def make_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    gen = torch.Generator().manual_seed(seed)
    shape = list(problem["shape"])
    dim = problem.get("dim", -1)
    d = dim % len(shape)
    # Drawn with dim last, so rows are easy to address, then moved back into place.
    values = torch.randn(shape[:d] + shape[d + 1 :] + [shape[d]], generator=gen) * problem.get("magnitude", 1.0)
    if values.numel():
        rows = values.view(-1, shape[d])
        neg_inf = problem.get("neg_inf", "none")
        if neg_inf == "some":
            rows[torch.rand(rows.shape, generator=gen) < 0.1] = float("-inf")
        elif neg_inf == "row":
            rows[int(torch.randint(rows.shape[0], (1,), generator=gen))] = float("-inf")
        elif neg_inf == "prefix":
            rows[:, : shape[d] // 2] = float("-inf")
    # The layout is made on the device: moving a strided view between devices would make it contiguous.
    x = values.movedim(-1, d).to(device=device, dtype=dtype)
    layout = problem.get("layout", "contiguous")
    if layout == "transposed" and len(shape) >= 2:
        reverse = list(range(len(shape)))[::-1]
        x = x.permute(reverse).contiguous().permute(reverse)
    elif layout == "sliced":
        x = torch.empty(shape[:-1] + [2 * shape[-1]], dtype=dtype, device=device)[..., ::2].copy_(x)
    else:
        x = x.contiguous()
    return {"x": x, "dim": dim}


def cost(problem: dict, dtype: torch.dtype) -> Cost:
    rows, n = row_shape(problem)
    numel = rows * n
    return Cost(flops=5 * numel, bytes=2 * numel * dtype.itemsize)


def parse_shape(text: str) -> dict:
    """'4096x8192' or '8x128x1000' -> a contiguous problem of that shape, softmax over the last dim."""
    shape = parse_sizes(text)
    return {"shape": shape, "dim": -1, "layout": "contiguous", "magnitude": 1.0, "neg_inf": "none"}


def bucket_edges(problem: dict) -> list[dict]:
    """Problems a config tuned for problem's bucket must get right: the shortest and longest rows of
    the bucket (never a block multiple), few rows, -inf patterns, large values, strided layouts."""
    rows, n = row_shape(problem)
    full = next_pow2(n)
    lengths = sorted({max(1, full // 2 + 1), max(1, full - 1), n})
    few_rows = min(rows, 33) or 1  # keeps next_pow2(rows) >= any ROWS_PER_PROGRAM that fits the bucket
    edges = []
    for i, length in enumerate(lengths):
        for j, (neg_inf, magnitude, layout) in enumerate(
            [("none", 1.0, "contiguous"), ("prefix", 1.0, "sliced"), ("some", 1e4, "contiguous"), ("row", 1e-3, "transposed")]
        ):
            rows_here = few_rows if (i + j) % 2 else min(rows, 3) or 1
            shape, dim = ([length, rows_here], 0) if layout == "transposed" else ([rows_here, length], -1)
            edges.append({"shape": shape, "dim": dim, "layout": "contiguous" if layout == "transposed" else layout,
                          "magnitude": magnitude, "neg_inf": neg_inf})
    return edges


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
    presets=[parse_shape(f"4096x{n}") for n in (1024, 4096, 8192, 16384, 32768)] + [parse_shape("1024x131072")],
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

    Differentiable: the backward is PyTorch arithmetic on the saved output (not a tuned kernel yet).
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
        y32, g32 = y.float(), grad.float()
        dx = y32 * (g32 - (g32 * y32).sum(ctx.dim, keepdim=True))
        return dx.to(y.dtype), None


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
