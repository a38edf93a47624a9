"""layer_norm and rms_norm over the trailing dims, optionally fused with the residual add before them
(the pre-norm transformer block: h = x + residual; y = norm(h); both returned), forward kernels and the
public functions (torch custom ops with autograd through the tuned backward kernels)."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from autotune import runtime
from autotune.kernels.common import checks as _checks
from autotune.kernels.common import launch as launch_
from autotune.kernels.common import second_order as _second_order
from autotune.kernels.common.rounding import round_to
from autotune.kernels.norm import checks as _norm_checks
from autotune.kernels.norm import layer_norm_backward as backward_
from autotune.kernels.norm import problems as problems_
from autotune.kernels.norm.reference import forward_floor, norm_gradients, torch_norm
from autotune.kernels.norm.rows import as_rows, flat, unit_stride
from autotune.search_spaces.layer_norm import FORWARD_SPACE, bucket
from autotune.spec import Inputs, KernelSpec


@triton.jit
def _load_sum(x_ptr, r_ptr, h_ptr, x_offs, r_offs, h_offs, mask, HAS_RESIDUAL: tl.constexpr, STORE_H: tl.constexpr):
    """The values to normalize: x, or the exact sum x + residual (float64 for float32 inputs; float32 holds
    the sum of two halves exactly). y is the norm of that exact sum, as in float64: normalizing the sum
    rounded to the storage dtype would add its rounding to every deviation from the mean, which for rows
    around a large offset is most of the deviation. With STORE_H, the rounded sum is stored as h.
    Masked lanes are 0."""
    x = tl.load(x_ptr + x_offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(r_ptr + r_offs, mask=mask, other=0.0).to(tl.float32)
        if x_ptr.dtype.element_ty == tl.float32:
            x = x.to(tl.float64) + r.to(tl.float64)
        else:
            x = x + r
        if STORE_H:
            tl.store(h_ptr + h_offs, round_to(x.to(tl.float32), h_ptr.dtype.element_ty), mask=mask)
    return x


@triton.jit
def _chunk_moments(x, mask, n):
    """Mean and sum of squared deviations of each row's valid lanes of x, in float64 and two passes over
    registers: the moments a looped pass merges."""
    d = tl.where(mask, x.to(tl.float64), 0.0)
    mean = tl.sum(d, axis=1) / n
    dev = tl.where(mask, d - mean[:, None], 0.0)
    return mean, tl.sum(dev * dev, axis=1)


@triton.jit
def _store_mean(mean_ptr, rows, n_rows, row_ok, mean):
    """The float64 row mean as an unevaluated sum of two float32 numbers, hi (at rows) + lo (n_rows
    further), stored and returned. x - hi is exact for x near the mean, so deviations keep their digits
    even in rows around a large offset, here and in the backward; a constant row has hi equal to its
    value and deviations of exactly 0."""
    hi = mean.to(tl.float32)
    lo = (mean - hi).to(tl.float32)
    tl.store(mean_ptr + rows, hi, mask=row_ok)
    tl.store(mean_ptr + n_rows + rows, lo, mask=row_ok)
    return hi, lo


@triton.jit
def _affine_store(xc, rstd, w_ptr, b_ptr, y_ptr, y_offs, cols, col_ok, mask,
                  HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    y = xc.to(tl.float32) * rstd[:, None]
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_WEIGHT and HAS_BIAS:
        # One rounding where y * w and b cancel, as compiled code contracts it anyway; the interpreter
        # would round twice.
        y = tl.fma(y, w, b)
    elif HAS_WEIGHT:
        y = y * w
    elif HAS_BIAS:
        y = y + b
    tl.store(y_ptr + y_offs, round_to(y, y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _norm_single_kernel(
    x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, h_ptr, mean_ptr, rstd_ptr,
    n_rows, n_cols, x_stride, r_stride, y_stride, h_stride, eps,
    IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr,
):
    """Whole rows in registers: one read of x (and the residual), one write of y (and h) per element."""
    rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    row_ok = rows < n_rows
    rows = rows.to(tl.int64)  # row * stride can pass 2**31
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = row_ok[:, None] & col_ok[None, :]
    x = _load_sum(x_ptr, r_ptr, h_ptr, rows[:, None] * x_stride + cols[None, :], rows[:, None] * r_stride + cols[None, :],
                  rows[:, None] * h_stride + cols[None, :], mask, HAS_RESIDUAL, True)
    n = tl.zeros((ROWS_PER_PROGRAM,), tl.float32) + n_cols
    if IS_RMS:
        xc = x
    else:
        # The mean summed in float64: where an element sits near the mean, its output is the mean's
        # error over its distance from it, and float32 sums of a few thousand elements err by more than
        # torch's cascade sums. Then the deviations, in registers: a second pass, never E[x^2] - E[x]^2.
        hi, lo = _store_mean(mean_ptr, rows, n_rows, row_ok, tl.sum(x.to(tl.float64), axis=1) / n)
        xc = tl.where(mask, (x - hi[:, None]) - lo[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / n
    rstd = tl.rsqrt(var.to(tl.float32) + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    _affine_store(xc, rstd, w_ptr, b_ptr, y_ptr, rows[:, None] * y_stride + cols[None, :], cols, col_ok, mask,
                  HAS_WEIGHT, HAS_BIAS)


@triton.jit
def _norm_looped_kernel(
    x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, h_ptr, mean_ptr, rstd_ptr,
    n_rows, n_cols, x_stride, r_stride, y_stride, h_stride, eps,
    IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr,
):
    """Rows of any length in BLOCK_N chunks: a pass for the statistics, a pass that normalizes and writes
    y (and h)."""
    rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    row_ok = rows < n_rows
    rows = rows.to(tl.int64)
    x_rows = rows[:, None] * x_stride
    r_rows = rows[:, None] * r_stride
    h_rows = rows[:, None] * h_stride
    cols = tl.arange(0, BLOCK_N)
    zero = tl.zeros((ROWS_PER_PROGRAM,), tl.float32)
    mask = row_ok[:, None] & (cols[None, :] < n_cols)
    x = _load_sum(x_ptr, r_ptr, h_ptr, x_rows + cols[None, :], r_rows + cols[None, :], h_rows + cols[None, :],
                  mask, HAS_RESIDUAL, False)
    if IS_RMS:
        squares = x * x
        for start in range(BLOCK_N, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = _load_sum(x_ptr, r_ptr, h_ptr, x_rows + c[None, :], r_rows + c[None, :], h_rows + c[None, :],
                          mask, HAS_RESIDUAL, False)
            squares += x * x
        hi = zero
        lo = zero
        var = tl.sum(squares, axis=1) / (zero + n_cols)
    else:
        # Chunk moments in float64, merged with Chan's pairwise update: rows around a large offset keep
        # their variance, and the mean its last float32 digit.
        count = (zero + tl.minimum(n_cols, BLOCK_N)).to(tl.float64)
        mean, m2 = _chunk_moments(x, mask, count)
        for start in range(BLOCK_N, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = _load_sum(x_ptr, r_ptr, h_ptr, x_rows + c[None, :], r_rows + c[None, :], h_rows + c[None, :],
                          mask, HAS_RESIDUAL, False)
            n_b = zero + tl.minimum(n_cols - start, BLOCK_N)
            mean_b, m2_b = _chunk_moments(x, mask, n_b)
            total = count + n_b
            weight_b = n_b / total
            delta = mean_b - mean
            mean += delta * weight_b
            m2 += m2_b + delta * delta * count * weight_b
            count = total
        var = m2 / count
        hi, lo = _store_mean(mean_ptr, rows, n_rows, row_ok, mean)
    rstd = tl.rsqrt(var.to(tl.float32) + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    # The second pass reads x (and the residual) again rather than h: h is the rounded sum.
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        col_ok = c < n_cols
        mask = row_ok[:, None] & col_ok[None, :]
        x = _load_sum(x_ptr, r_ptr, h_ptr, x_rows + c[None, :], r_rows + c[None, :], h_rows + c[None, :],
                      mask, HAS_RESIDUAL, True)
        xc = (x - hi[:, None]) - lo[:, None]
        _affine_store(xc, rstd, w_ptr, b_ptr, y_ptr, rows[:, None] * y_stride + c[None, :], c, col_ok, mask,
                      HAS_WEIGHT, HAS_BIAS)


_KERNELS = {"single": _norm_single_kernel, "looped": _norm_looped_kernel}


def _launcher(config: dict, rms: bool, has_residual: bool, has_weight: bool, has_bias: bool, n_rows: int,
              prebound: bool = False):
    """(the kernel bound to its grid, its compile-time arguments) for a launch on n_rows rows with one config;
    prebound: for a launch kept for later calls (a plan), as `launch.planned` says."""
    rows_per_program = config["ROWS_PER_PROGRAM"]
    meta = dict(IS_RMS=rms, HAS_RESIDUAL=has_residual, HAS_WEIGHT=has_weight, HAS_BIAS=has_bias,
                BLOCK_N=config["BLOCK_N"], ROWS_PER_PROGRAM=rows_per_program,
                num_warps=config["num_warps"], num_stages=config["num_stages"])
    kernel, grid = _KERNELS[config["variant"]], (-(-n_rows // rows_per_program),)
    return (launch_.planned(kernel, grid) if prebound else kernel[grid]), meta


def launch_rows(x, residual, weight, bias, y, h, mean, rstd, eps: float, rms: bool, config: dict) -> None:
    """Normalize the (rows, N) x (plus residual, into h) into y with one config. The float32 row
    statistics go to rstd (rows,) and, for layer_norm, mean (2, rows): the mean as the sum of its two rows.
    Every row-shaped tensor has unit column stride."""
    n_rows, n_cols = x.shape
    kernel, meta = _launcher(config, rms, residual is not None, weight is not None, bias is not None, n_rows)
    # Absent tensors are never read (their constexpr flag is off); x stands in as a valid pointer.
    kernel(
        x, x if residual is None else residual, x if weight is None else weight, x if bias is None else bias,
        y, y if h is None else h, rstd if mean is None else mean, rstd,
        n_rows, n_cols, x.stride(0), 0 if residual is None else residual.stride(0), y.stride(0),
        0 if h is None else h.stride(0), eps, **meta,
    )


def _as_rows(t: torch.Tensor | None, norm_dims: int) -> torch.Tensor | None:
    return unit_stride(as_rows(t, norm_dims))


def _launch_spec(inputs: Inputs, config: dict, out, rms: bool):
    """A spec's launch: normalize inputs into `out` (y, or (y, h) with a residual; contiguous)."""
    k = len(inputs["normalized_shape"])
    x = _as_rows(inputs["x"], k)
    residual = _as_rows(inputs["residual"], k)
    y, h = (out, None) if residual is None else out
    if x.numel() == 0:
        return out
    stats = torch.empty((3, x.shape[0]), dtype=torch.float32, device=x.device)
    launch_rows(x, residual, flat(inputs["weight"]), flat(inputs["bias"]), y.view(x.shape),
                None if h is None else h.view(x.shape), None if rms else stats[:2], stats[2], inputs["eps"], rms, config)
    return out


def _spec(name: str, rms: bool) -> KernelSpec:
    def public(inputs):
        fn = rms_norm if rms else layer_norm
        kwargs = {} if rms else {"bias": inputs["bias"]}
        return fn(inputs["x"], inputs["normalized_shape"], inputs["weight"], eps=inputs["eps"],
                  residual=inputs["residual"], **kwargs)

    goal = [problems_.parse_shape(s, rms=rms) for s in ("8192x4096+res", "16384x8192+res")]
    third = problems_.parse_shape("8192x4096", rms=rms)
    return KernelSpec(
        name=name,
        space=FORWARD_SPACE,
        launch=lambda inputs, config, out: _launch_spec(inputs, config, out, rms),
        reference=lambda inputs: torch_norm(inputs, rms, torch.float64),
        baseline=lambda inputs: torch_norm(inputs, rms, None),
        problems=lambda max_numel: problems_.problems(max_numel, rms=rms),
        problems_for_config=lambda config, dtype, max_numel: problems_.problems_for_config(
            FORWARD_SPACE, config, max_numel, rms=rms),
        make_inputs=problems_.forward_inputs,
        bucket=bucket,
        cost=lambda problem, dtype: problems_.forward_cost(problem, dtype, rms=rms),
        presets=[*goal, third],
        interpreter_presets=[problems_.parse_shape("8x300+res", rms=rms)],
        parse_shape=lambda text: problems_.parse_shape(text, rms=rms),
        sources=(round_to, _load_sum, _chunk_moments, _store_mean, _affine_store, _norm_single_kernel, _norm_looped_kernel),
        description=("rms_norm" if rms else "layer_norm") + " over the trailing dims, optionally fused with a residual add",
        bucket_edges=lambda problem: problems_.bucket_edges(problem, rms=rms),
        public=public,
        error_floor=None if rms else forward_floor,
    )


LAYER_NORM = _spec("layer_norm", rms=False)
RMS_NORM = _spec("rms_norm", rms=True)
_TUNED = {False: runtime.tuned(LAYER_NORM), True: runtime.tuned(RMS_NORM)}


def _config(rms: bool, dtype: torch.dtype, m: int, n: int, has_res: bool) -> dict:
    return _TUNED[rms].lookup(
        dtype, (m, n, has_res), lambda: bucket({"shape": [m, n], "residual": has_res}),
        lambda: {"shape": [m, n], "residual": has_res},
    )


def forward_rows(x, weight, bias, residual, eps: float, rms: bool):
    """The tuned forward on (rows, N) tensors: (y, h or an empty tensor, mean (2, rows) or empty, rstd)."""
    m, n = x.shape
    x, residual = unit_stride(x), unit_stride(residual)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    h = torch.empty_like(y) if residual is not None else y.new_empty(0)
    # Separate allocations: a custom op's outputs may not alias one another.
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    mean = rstd.new_empty((0,) if rms else (2, m))
    if y.numel():
        has_res = residual is not None
        config = _config(rms, x.dtype, m, n, has_res)
        runtime.note_launch("rms_norm" if rms else "layer_norm", config)
        launch_rows(x, residual, weight, bias, y, h if has_res else None, None if rms else mean, rstd, eps, rms, config)
    return y, h, mean, rstd


def _plan(rms: bool, dtype: torch.dtype, m: int, n: int, has_res: bool, has_weight: bool, has_bias: bool):
    """(config, kernel bound to its grid, compile-time arguments) of a call on m contiguous rows of n."""
    config = _config(rms, dtype, m, n, has_res)
    return (config, *_launcher(config, rms, has_res, has_weight, has_bias, m, prebound=True))


def _forward_contiguous(x, weight, bias, residual, eps: float, rms: bool, n: int, keep_mean: bool):
    """(y, h or None, mean or None) for a non-empty contiguous x, residual and parameters, y and h in x's
    shape: rows are addressed in place at stride n, the launch is planned once per call shape, and no
    view is made. mean (layer_norm's (2, rows) row means) only if keep_mean."""
    m = x.numel() // n
    has_res, has_weight, has_bias = residual is not None, weight is not None, bias is not None
    config, kernel, meta = _TUNED[rms].derived(
        (x.dtype, m, n, has_res, has_weight, has_bias),
        lambda: _plan(rms, x.dtype, m, n, has_res, has_weight, has_bias),
    )
    y = torch.empty_like(x)  # contiguous like x; no memory_format argument, whose parsing costs 1 us
    h = torch.empty_like(x) if has_res else None
    keep_mean = keep_mean and not rms
    if keep_mean:
        mean = torch.empty((2, m), dtype=torch.float32, device=x.device)
        rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    else:
        # Statistics nobody reads (the backward recomputes rstd): mean and rstd share one buffer, which
        # the kernel only writes. An allocation less, about 2 us of host time.
        mean = rstd = x.new_empty(m if rms else 2 * m, dtype=torch.float32)
    runtime.note_launch("rms_norm" if rms else "layer_norm", config)
    kernel(x, residual if has_res else x, weight if has_weight else x, bias if has_bias else x, y,
           h if has_res else y, mean, rstd, m, n, n, n if has_res else 0, n, n if has_res else 0, eps, **meta)
    return y, h, mean if keep_mean else None


@torch.library.custom_op("autotune::fused_norm", mutates_args=())
def _fused_norm(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, residual: torch.Tensor | None,
    eps: float, rms: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return forward_rows(x, weight, bias, residual, eps, rms)


@_fused_norm.register_fake
def _(x, weight, bias, residual, eps, rms):
    m, n = x.shape
    y = x.new_empty((m, n))
    h = x.new_empty((m, n) if residual is not None else (0,))
    return y, h, x.new_empty((0,) if rms else (2, m), dtype=torch.float32), x.new_empty((m,), dtype=torch.float32)


def _setup_context(ctx, inputs, output) -> None:
    x, weight, bias, residual, eps, rms = inputs
    _, h, mean, _ = output
    ctx.set_materialize_grads(False)  # an unused h gets no gradient, not a tensor of zeros to read
    # The backward differentiates at h, the sum as the caller holds it; the mean is that of the exact sum,
    # which differs from h by h's rounding. rstd it recomputes, in float64.
    ctx.save_for_backward(x if residual is None else h, weight, bias, mean)
    ctx.eps, ctx.rms, ctx.has_residual = eps, rms, residual is not None


def _grads(backward, dy, dh, x, weight, bias, mean, eps: float, rms: bool, has_residual: bool):
    """(dx, dweight, dbias, dresidual) through backward (the backward op, or backward_rows itself) from dy
    and dh, None where the outputs got no gradient; x, dy and dh are (rows, N), the parameters flat."""
    if dy is None and dh is None:
        return None, None, None, None
    if dy is None:
        dy = torch.zeros_like(x)
    if _second_order.recording():
        dx, dw, db = norm_gradients(dy, x, weight, bias, eps, rms)
        dx = dx if dh is None else dh if dx is None else dx + dh
        return dx, dw, db, dx if has_residual else None
    dx, dw, db = backward(dy, x, weight, bias, mean, dh, eps, rms)
    return dx, None if weight is None else dw, None if bias is None else db, dx if has_residual else None


def _fused_norm_backward(ctx, dy, dh, _dmean, _drstd):
    x, weight, bias, mean = ctx.saved_tensors
    grads = _grads(torch.ops.autotune.fused_norm_backward, dy, dh, x, weight, bias, mean, ctx.eps, ctx.rms,
                   ctx.has_residual)
    return (*grads, None, None)


_fused_norm.register_autograd(_fused_norm_backward, setup_context=_setup_context)


class _ContiguousNorm(torch.autograd.Function):
    """The custom op's forward and backward for eager calls that record a graph, on contiguous tensors,
    without the op's dispatch (about 150 us of host time per call on a CPU) and without views of tensors
    that require grad. torch.compile traces the custom op instead."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, eps: float, rms: bool, n: int):
        y, h, mean = _forward_contiguous(x, weight, bias, residual, eps, rms, n, keep_mean=True)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x if residual is None else h, weight, bias, mean)  # as _setup_context does
        ctx.eps, ctx.rms, ctx.has_residual, ctx.n = eps, rms, residual is not None, n
        return y, h

    @staticmethod
    def backward(ctx, dy, dh):
        x, weight, bias, mean = ctx.saved_tensors
        n = ctx.n

        def rows(t):
            return None if t is None else t.reshape(-1, n)

        dx, dw, db, dres = _grads(backward_.backward_rows, rows(dy), rows(dh), x.view(-1, n), flat(weight),
                                  flat(bias), mean, ctx.eps, ctx.rms, ctx.has_residual)
        return (None if dx is None else dx.view(x.shape), None if dw is None else dw.view(weight.shape),
                None if db is None else db.view(bias.shape), None if dres is None else dres.view(x.shape),
                None, None, None)


def _norm(x, shape, weight, bias, eps: float, residual, rms: bool):
    eps = float(eps)
    eager = not torch.compiler.is_compiling() and type(x) in _checks.EAGER_TYPES
    grad = torch.is_grad_enabled() and (x.requires_grad or weight is not None and weight.requires_grad
                                        or bias is not None and bias.requires_grad
                                        or residual is not None and residual.requires_grad)
    if (eager and x.is_contiguous() and x.numel() and (residual is None or residual.is_contiguous())
            and (weight is None or weight.is_contiguous()) and (bias is None or bias.is_contiguous())):
        n = shape[0] if len(shape) == 1 else math.prod(shape)
        if grad:
            y, h = _ContiguousNorm.apply(x, weight, bias, residual, eps, rms, n)
        else:
            y, h, _ = _forward_contiguous(x, weight, bias, residual, eps, rms, n, keep_mean=False)
        return y if residual is None else (y, h)
    k = len(shape)
    rows, residual_rows = as_rows(x, k), as_rows(residual, k)
    if (eager and x.numel() and rows.is_contiguous() and (residual_rows is None or residual_rows.is_contiguous())
            and not (x.is_contiguous() and (residual is None or residual.is_contiguous()))):
        # Rows that reshape only by a copy (a transposed (batch, positions, channels) view, say): the copy torch's
        # norm makes too, then the planned launch of contiguous rows rather than Triton's binding on every call.
        out = _norm(rows, (rows.shape[1],), weight, bias, eps, residual_rows, rms)
        return out.view(x.shape) if residual is None else (out[0].view(x.shape), out[1].view(x.shape))
    args = (rows, flat(weight), flat(bias), residual_rows, eps, rms)
    if grad or not eager:
        y, h, _, _ = _fused_norm(*args)  # also what torch.compile traces
    else:
        y, h, _, _ = forward_rows(*args)
    y = y.view(x.shape)
    return y if residual is None else (y, h.view(x.shape))


def layer_norm(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, residual: torch.Tensor | None = None):
    """torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps) with the tuned config.

    With `residual`, the add is fused: returns (layer_norm(x + residual), x + residual); y normalizes the
    exact sum, the returned sum is rounded to x's dtype. Differentiable in x, weight, bias and residual through
    tuned backward kernels; a backward recorded for second-order gradients (create_graph=True) runs torch's
    norm instead. A torch custom op, so it works under torch.compile(fullgraph=True).
    """
    shape = _norm_checks.check(x, normalized_shape, weight, bias, eps, residual, eps_may_be_none=False)
    return _norm(x, shape, weight, bias, eps, residual, rms=False)


def rms_norm(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None, eps: float | None = None,
             residual: torch.Tensor | None = None):
    """torch.nn.functional.rms_norm(x, normalized_shape, weight, eps) with the tuned config; eps=None
    means what it means there: float32's epsilon, the dtype torch computes in (for half inputs too).

    With `residual`, the add is fused: returns (rms_norm(x + residual), x + residual); y normalizes the
    exact sum, the returned sum is rounded to x's dtype. Differentiable in x, weight and residual through tuned
    backward kernels; a backward recorded for second-order gradients (create_graph=True) runs torch's norm
    instead. A torch custom op, so it works under torch.compile(fullgraph=True).
    """
    shape = _norm_checks.check(x, normalized_shape, weight, None, eps, residual, eps_may_be_none=True)
    return _norm(x, shape, weight, None, problems_.RMS_NORM_DEFAULT_EPS if eps is None else eps, residual, rms=True)
