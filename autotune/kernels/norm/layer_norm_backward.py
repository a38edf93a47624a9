"""Backward of layer_norm and rms_norm: dx per row, and the weight and bias gradients summed over rows,
either through per-program partial rows that a second small kernel adds up ("partials") or atomics
into one row ("atomic"). With a fused residual, the gradient of the returned sum joins dx (and is also
the residual's gradient). A row is read twice, once for its sums and once for dx (READS=2), or, where it
fits one block, once, its tiles held in registers across the sums (READS=1: fewer loads, more registers).

The arithmetic is float64 from the loads on (exact products of the stored values, sums that drift by
nothing the output can show), and rstd is recomputed from the row rather than read: dx subtracts row
means from each element and the parameter gradients are column sums, so wherever a result is small
next to its terms, float32 rounding of the terms is all that is left of it, and the gate compares that
noise with torch's own, element by element. On an H100 the float64 work should stay under the memory
time (about a third of its float64 rate at full bandwidth; not yet measured); on GPUs with slow float64
it would not.

That is the first kernel (kernel="rows64"). The space also holds a second (kernel="tiles",
`layer_norm_backward_tiles`): float32 arithmetic and partial rows for 16-bit data, BLOCK_M one-block rows read
once at a time, L2 kept for a row read twice; a third (kernel="tiles_early", `layer_norm_backward_tiles_early`):
the second for one-block rows read once with a fused residual, loading the sum's gradient with the row; and a fourth
(kernel="tiles_ahead", `layer_norm_backward_tiles_ahead`): the second for one-block rows read once, loading the next
rows during the current ones' sums, which reduce in one pass. A search picks between them per bucket; the rows tuned
before each of the later ones existed stay current (`extends`). The partial rows of either are summed by `_sum_partials_kernel`,
in float64 whatever they are kept in.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune import gpu, runtime
from autotune.kernels.common import launch as launch_
from autotune.kernels.common.grid import cdiv
from autotune.kernels.common.rounding import round_to
from autotune.kernels.norm import layer_norm_backward_tiles as tiles_
from autotune.kernels.norm import layer_norm_backward_tiles_ahead as ahead_
from autotune.kernels.norm import layer_norm_backward_tiles_early as early_
from autotune.kernels.norm import problems as problems_
from autotune.kernels.norm.backward_math import _centered_wdy, _dx, _row_rstd
from autotune.kernels.norm.rows import as_rows, flat, mixed_params, unit_stride
from autotune.search_spaces.layer_norm import (
    BACKWARD_SPACE,
    BEFORE_TILES,
    BEFORE_TILES_AHEAD,
    BEFORE_TILES_EARLY,
    TILES_KERNELS,
    bucket,
)
from autotune.space import next_pow2
from autotune.spec import EarlierSpace, Inputs, KernelSpec

INTERPRETER_SMS = 2
"""The interpreter has no SMs; a few programs per "SM" still make the cross-program sums real."""
SUM_TILE = 2048
"""Partial-row elements one program of the second "partials" kernel adds per step."""
SUM_MIN_COLS = 64
SUM_MAX_PROGRAMS = 256
"""Columns per program of that kernel: at least SUM_MIN_COLS, more once the row would need more programs."""


@triton.jit
def _load64(ptr, offs, mask):
    return tl.load(ptr + offs, mask=mask, other=0.0).to(tl.float32).to(tl.float64)


@triton.jit
def _store_dx(dx, dh_ptr, dx_ptr, dh_offs, dx_offs, mask, HAS_DH: tl.constexpr):
    if HAS_DH:
        dx += _load64(dh_ptr, dh_offs, mask)
    # Through float32: the Triton interpreter casts float64 to bfloat16 wrongly.
    tl.store(dx_ptr + dx_offs, round_to(dx.to(tl.float32), dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _norm_backward_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, dh_ptr, dx_ptr, dw_ptr, db_ptr,
    n_rows, n_cols, dy_stride, x_stride, dh_stride, dx_stride, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_DH: tl.constexpr,
    ATOMIC: tl.constexpr, ONE_CHUNK: tl.constexpr, ONE_READ: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program p handles rows p, p + P, ... . dw_ptr/db_ptr: this program's float64 partial row at
    p * n_cols (partials), or one float64 row every program adds into (atomic)."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    part = 0 if ATOMIC else pid.to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK_N)
    # Where the row fits one block, the parameter gradients stay in registers across all of the program's
    # rows (otherwise they go to memory chunk by chunk; partial rows start zeroed).
    dw_acc = tl.zeros((BLOCK_N,), tl.float64)
    db_acc = tl.zeros((BLOCK_N,), tl.float64)
    w_row = _load64(w_ptr, cols, cols < n_cols) if HAS_WEIGHT and ONE_READ else 1.0
    for row in range(pid.to(tl.int64), n_rows, n_programs):  # int64: row * stride can pass 2**31
        hi = 0.0 if IS_RMS else tl.load(mean_ptr + row).to(tl.float64)
        lo = 0.0 if IS_RMS else tl.load(mean_ptr + n_rows + row).to(tl.float64)
        if ONE_READ:
            # One read of the one-chunk row: its float64 tiles (and the weight's) stay live across the sums.
            col_ok = cols < n_cols
            dy = _load64(dy_ptr, row * dy_stride + cols, col_ok)
            xc, wdy = _centered_wdy(_load64(x_ptr, row * x_stride + cols, col_ok), dy, w_row, hi, lo, col_ok,
                                    IS_RMS, HAS_WEIGHT)
            rstd = _row_rstd(tl.sum(xc * xc, axis=0), n_cols, eps)
            xhat = xc * rstd
            sum_wdy = 0.0 if IS_RMS else tl.sum(wdy, axis=0)
            dx = _dx(xhat, wdy, rstd, tl.sum(xhat * wdy, axis=0), sum_wdy, n_cols, IS_RMS)
            _store_dx(dx, dh_ptr, dx_ptr, row * dh_stride + cols, row * dx_stride + cols, col_ok, HAS_DH)
            dw_acc += dy * xhat
            db_acc += dy
        else:
            # Two reads of the row: one for its sums, reduced to scalars as they go, one for dx and the
            # gradients. The second mostly hits the cache; holding the row's float64 tiles across the sums
            # instead spills at 8192 columns (benchmarks/norm_backward_spills.py).
            sum_xc_wdy = tl.full((), 0.0, tl.float64)
            sum_wdy = tl.full((), 0.0, tl.float64)
            sum_squares = tl.full((), 0.0, tl.float64)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_ok = c < n_cols
                w = _load64(w_ptr, c, col_ok) if HAS_WEIGHT else 1.0
                xc, wdy = _centered_wdy(_load64(x_ptr, row * x_stride + c, col_ok), _load64(dy_ptr, row * dy_stride + c, col_ok),
                                        w, hi, lo, col_ok, IS_RMS, HAS_WEIGHT)
                sum_xc_wdy += tl.sum(xc * wdy, axis=0)
                sum_wdy += tl.sum(wdy, axis=0)
                sum_squares += tl.sum(xc * xc, axis=0)
            rstd = _row_rstd(sum_squares, n_cols, eps)
            total_xhat_wdy = rstd * sum_xc_wdy
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_ok = c < n_cols
                w = _load64(w_ptr, c, col_ok) if HAS_WEIGHT else 1.0
                dy = _load64(dy_ptr, row * dy_stride + c, col_ok)
                xc, wdy = _centered_wdy(_load64(x_ptr, row * x_stride + c, col_ok), dy, w, hi, lo, col_ok,
                                        IS_RMS, HAS_WEIGHT)
                xhat = xc * rstd
                dx = _dx(xhat, wdy, rstd, total_xhat_wdy, sum_wdy, n_cols, IS_RMS)
                _store_dx(dx, dh_ptr, dx_ptr, row * dh_stride + c, row * dx_stride + c, col_ok, HAS_DH)
                if ONE_CHUNK:
                    dw_acc += dy * xhat
                    db_acc += dy
                elif ATOMIC:
                    if HAS_WEIGHT:
                        tl.atomic_add(dw_ptr + c, dy * xhat, mask=col_ok, sem="relaxed")
                    if HAS_BIAS:
                        tl.atomic_add(db_ptr + c, dy, mask=col_ok, sem="relaxed")
                else:
                    # Only this program touches its partial row, and each lane reads what it wrote.
                    if HAS_WEIGHT:
                        tl.store(dw_ptr + part + c, tl.load(dw_ptr + part + c, mask=col_ok) + dy * xhat, mask=col_ok)
                    if HAS_BIAS:
                        tl.store(db_ptr + part + c, tl.load(db_ptr + part + c, mask=col_ok) + dy, mask=col_ok)
    if ONE_CHUNK:
        col_ok = cols < n_cols
        if ATOMIC:
            if HAS_WEIGHT:
                tl.atomic_add(dw_ptr + cols, dw_acc, mask=col_ok, sem="relaxed")
            if HAS_BIAS:
                tl.atomic_add(db_ptr + cols, db_acc, mask=col_ok, sem="relaxed")
        else:
            if HAS_WEIGHT:
                tl.store(dw_ptr + part + cols, dw_acc, mask=col_ok)
            if HAS_BIAS:
                tl.store(db_ptr + part + cols, db_acc, mask=col_ok)


@triton.jit
def _sum_partials_kernel(
    dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, n_parts, n_cols,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_PARTS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    """Column sums of the (n_parts, n_cols) float64 partial rows, stored in the gradients' dtypes."""
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_ok = cols < n_cols
    parts = tl.arange(0, BLOCK_PARTS)
    dw = tl.zeros((BLOCK_PARTS, BLOCK_COLS), tl.float64)
    db = tl.zeros((BLOCK_PARTS, BLOCK_COLS), tl.float64)
    for start in range(0, n_parts, BLOCK_PARTS):
        p = start + parts
        mask = (p[:, None] < n_parts) & col_ok[None, :]
        offs = p[:, None].to(tl.int64) * n_cols + cols[None, :]
        if HAS_WEIGHT:
            dw += tl.load(dw_part_ptr + offs, mask=mask, other=0.0)
        if HAS_BIAS:
            db += tl.load(db_part_ptr + offs, mask=mask, other=0.0)
    # Through float32: the Triton interpreter casts float64 to bfloat16 wrongly.
    if HAS_WEIGHT:
        tl.store(dw_ptr + cols, round_to(tl.sum(dw, axis=0).to(tl.float32), dw_ptr.dtype.element_ty), mask=col_ok)
    if HAS_BIAS:
        tl.store(db_ptr + cols, round_to(tl.sum(db, axis=0).to(tl.float32), db_ptr.dtype.element_ty), mask=col_ok)


def _sm_count() -> int:
    return gpu.current_gpu().sm_count or INTERPRETER_SMS


def launch_rows(dy, x, weight, mean, dh, dx, dw, db, eps: float, rms: bool, config: dict, table=None) -> None:
    """Gradients of the norm of the (rows, N) x into dx (rows, N) and the flat dw, db (None: no such
    parameter), with one config. dy, x, dh, dx have unit column stride; mean (2, rows) holds each row's
    mean as the sum of its two rows, as the forward saves it (unused by rms_norm). table: a public call's
    runtime table, whose kept launches bind once (`launch.kept`)."""
    n_rows, n_cols = x.shape
    if n_rows == 0:
        for grad in (dw, db):
            if grad is not None:
                grad.zero_()
        return
    config = {**BEFORE_TILES, **config}  # a config stored before the tiles kernel means the first one
    tiles = config["kernel"] in TILES_KERNELS
    early = config["kernel"] == "tiles_early"
    block, block_m = config["BLOCK_N"], config["BLOCK_M"]
    one_chunk = block >= n_cols
    one_read = config["READS"] == 1
    if one_read and not one_chunk:
        raise ValueError(f"config: READS=1 needs the row in one block, got BLOCK_N={block} for rows of {n_cols}")
    if block_m > 1 and not (tiles and one_read):
        raise ValueError(f"config: BLOCK_M={block_m} rows at a time needs kernel='tiles' and READS=1")
    if early and not (one_read and dh is not None):
        raise ValueError("config: kernel='tiles_early' needs READS=1 and a fused residual's gradient (dh)")
    ahead = config["kernel"] == "tiles_ahead"
    if ahead and not one_read:
        raise ValueError("config: kernel='tiles_ahead' needs READS=1")
    programs = min(cdiv(n_rows, block_m), config["PROGRAMS_PER_SM"] * _sm_count())
    atomic = config["variant"] == "atomic"
    grad_dtypes = [grad.dtype for grad in (dw, db) if grad is not None]
    kept = dict(dtype=tiles_.partials_dtype(x.dtype, grad_dtypes) if tiles else torch.float64, device=x.device)

    def buffer(grad):
        if grad is None:
            return None
        if atomic:
            return torch.zeros(n_cols, **kept)
        # Partial rows: one program writes each whole; chunked rows add into them, so they start at zero.
        return (torch.empty if one_chunk else torch.zeros)((programs, n_cols), **kept)

    dw_buf, db_buf = buffer(dw), buffer(db)
    args = (
        dy, x, x if weight is None else weight, x if mean is None else mean, dy if dh is None else dh, dx,
        dx if dw_buf is None else dw_buf, dx if db_buf is None else db_buf,
        n_rows, n_cols, dy.stride(0), x.stride(0), 0 if dh is None else dh.stride(0), dx.stride(0), eps,
    )
    # What every kernel takes; the rows64 and tiles kernels add HAS_DH, ONE_CHUNK and ONE_READ, the tiles kernels
    # their accumulator (ACC, FINE) and BLOCK_M, tiles_ahead HAS_DH (tiles_early always has a dh).
    common = dict(
        IS_RMS=rms, HAS_WEIGHT=weight is not None, HAS_BIAS=db is not None, ATOMIC=atomic, BLOCK_N=block,
        num_warps=config["num_warps"], num_stages=config["num_stages"],
        enable_fp_fusion=False,  # a fused multiply-add would keep a rounding error where dx cancels to 0 exactly
    )
    meta = dict(common, HAS_DH=dh is not None, ONE_CHUNK=one_chunk, ONE_READ=one_read)
    if tiles:
        tile = dict(ACC=tiles_.TL_DTYPES[tiles_.accumulator(x.dtype)], FINE=tiles_.fine(x.dtype, grad_dtypes),
                    BLOCK_M=block_m)  # fmt: skip
    if ahead:
        launch_.kept(table, ahead_._norm_backward_tiles_ahead_kernel, (programs,))(
            *args, **common, **tile, HAS_DH=dh is not None
        )
    elif early:
        launch_.kept(table, early_._norm_backward_tiles_early_kernel, (programs,))(*args, **common, **tile)
    elif tiles:
        launch_.kept(table, tiles_._norm_backward_tiles_kernel, (programs,))(*args, **tile, **meta)
    else:
        launch_.kept(table, _norm_backward_kernel, (programs,))(*args, **meta)
    if atomic:
        for grad, buf in ((dw, dw_buf), (db, db_buf)):
            if grad is not None:
                grad.copy_(buf)
    elif dw is not None or db is not None:
        cols = max(SUM_MIN_COLS, next_pow2(cdiv(n_cols, SUM_MAX_PROGRAMS)))
        launch_.kept(table, _sum_partials_kernel, (cdiv(n_cols, cols),))(
            dx if dw_buf is None else dw_buf, dx if db_buf is None else db_buf,
            dx if dw is None else dw, dx if db is None else db, programs, n_cols,
            HAS_WEIGHT=dw is not None, HAS_BIAS=db is not None, BLOCK_PARTS=max(1, SUM_TILE // cols), BLOCK_COLS=cols,
            num_warps=4,
        )


def _launch_spec(inputs: Inputs, config: dict, out, rms: bool):
    """A spec's launch: (dx, dweight if weight, dbias if bias) into `out` (contiguous)."""
    k = len(inputs["normalized_shape"])
    rows = as_rows(inputs["x"], k)
    dx, *params = out
    dw = params.pop(0) if inputs["weight"] is not None else None
    db = params.pop(0) if inputs["bias"] is not None else None
    if rows.shape[1] == 0:
        return out
    launch_rows(
        unit_stride(as_rows(inputs["dy"], k)), unit_stride(rows), flat(inputs["weight"]), inputs["mean"],
        unit_stride(as_rows(inputs["dh"], k)), dx.view(rows.shape),
        None if dw is None else dw.view(-1), None if db is None else db.view(-1), inputs["eps"], rms, config,
    )
    return out


def _norm_formula(x: torch.Tensor, norm_dims: int, weight, bias, eps: float, rms: bool) -> torch.Tensor:
    """The norm written out in elementwise ops and means, for the float64 reference's autograd: not
    torch's fused kernels, whose CUDA backward returned a bias gradient of 0 for 65537 rows of one
    element (torch 2.11, float64 too)."""
    dims = tuple(range(-norm_dims, 0))
    if rms:
        y = x * torch.rsqrt(x.square().mean(dims, keepdim=True) + eps)
    else:
        centered = x - x.mean(dims, keepdim=True)
        y = centered * torch.rsqrt(centered.square().mean(dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _torch_grads(inputs: Inputs, rms: bool, dtype: torch.dtype | None):
    """Gradients of the norm (recomputed from x) in dtype: torch.nn.functional's in the inputs' own
    dtype (None), the formula's in float64."""
    def leaf(t):
        return None if t is None else (t if dtype is None else t.to(dtype)).detach().requires_grad_()

    x, weight, bias = leaf(inputs["x"]), leaf(inputs["weight"]), leaf(inputs["bias"])
    shape = list(inputs["normalized_shape"])
    with torch.enable_grad():
        if dtype == torch.float64:
            y = _norm_formula(x, len(shape), weight, bias, inputs["eps"], rms)
        elif rms:
            y = torch.nn.functional.rms_norm(x, shape, weight, inputs["eps"])
        elif weight is None and bias is not None:
            # torch's backward mishandles a lone bias: the CPU one rejects it in another dtype than x, the
            # CUDA one returns an empty gradient for it past 65536 rows (torch 2.11). The same math, bias apart.
            y = torch.nn.functional.layer_norm(x if bias.dtype == x.dtype else x.float(), shape, None, None,
                                               inputs["eps"]) + bias
        elif mixed_params(x, weight, bias):
            # float32 parameters on a half x: torch's mixed-dtype kernels compute in float32 and round dx
            # once; CUDA's refuse a lone weight. The same math through x.float().
            y = torch.nn.functional.layer_norm(x.float(), shape, weight, bias, inputs["eps"])
        else:
            y = torch.nn.functional.layer_norm(x, shape, weight, bias, inputs["eps"])
        leaves = [t for t in (x, weight, bias) if t is not None]
        grads = list(torch.autograd.grad(y, leaves, inputs["dy"].to(y.dtype)))
    if inputs["dh"] is not None:
        grads[0] = grads[0] + inputs["dh"].to(grads[0].dtype)
    return tuple(grads)


def make_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int, rms: bool) -> Inputs:
    """The normalized input x (the sum, when a residual was fused), parameters, dy, the sum's gradient dh
    (when the problem has a residual), and the row means the layer_norm forward saves."""
    inputs = problems_.forward_inputs(problem, dtype, device, seed)
    del inputs["residual"]
    x = inputs["x"]
    gen = torch.Generator().manual_seed(seed + 1)
    layout = problem.get("layout", "contiguous")
    inputs["dy"] = problems_.place(torch.randn(x.shape, generator=gen), layout, dtype, device)
    inputs["dh"] = problems_.place(torch.randn(x.shape, generator=gen), layout, dtype, device) if problem.get("residual") else None
    inputs["mean"] = None
    if not rms:  # as the forward saves it: the float64 mean as an unevaluated sum of two float32 numbers
        mean = as_rows(x.double(), len(inputs["normalized_shape"])).mean(-1)
        hi = mean.float()
        inputs["mean"] = torch.stack([hi, (mean - hi.double()).float()])
    return inputs


def backward_rows(dy, x, weight, bias, mean, dh, eps: float, rms: bool):
    """The tuned backward on (rows, N) tensors: (dx, dweight, dbias), an absent parameter's gradient an
    empty tensor. weight and bias are flat; bias is only read for its dtype; mean is the forward's
    (2, rows) row means (unused by rms_norm)."""
    m, n = x.shape
    dx = torch.empty((m, n), dtype=x.dtype, device=x.device)
    dw = torch.empty(n, dtype=weight.dtype, device=x.device) if weight is not None else x.new_empty(0)
    db = torch.empty(n, dtype=bias.dtype, device=x.device) if bias is not None else x.new_empty(0)
    if n:
        has_dh = dh is not None
        config = _TUNED[rms].lookup(
            x.dtype, (m, n, has_dh), lambda: bucket({"shape": [m, n], "residual": has_dh}),
            lambda: {"shape": [m, n], "residual": has_dh},
        )
        runtime.note_launch(("rms_norm" if rms else "layer_norm") + "_backward", config)
        launch_rows(unit_stride(dy), unit_stride(x), weight, None if rms else mean, unit_stride(dh), dx,
                    dw if weight is not None else None, db if bias is not None else None, eps, rms, config,
                    table=_TUNED[rms])
    return dx, dw, db


@torch.library.custom_op("autotune::fused_norm_backward", mutates_args=())
def fused_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, mean: torch.Tensor,
    dh: torch.Tensor | None, eps: float, rms: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """backward_rows as a torch op: what the forward op's autograd calls, so torch.compile sees one node."""
    return backward_rows(dy, x, weight, bias, mean, dh, eps, rms)


@fused_norm_backward.register_fake
def _(dy, x, weight, bias, mean, dh, eps, rms):
    m, n = x.shape
    return (x.new_empty((m, n)), x.new_empty((n,) if weight is not None else (0,), dtype=getattr(weight, "dtype", x.dtype)),
            x.new_empty((n,) if bias is not None else (0,), dtype=getattr(bias, "dtype", x.dtype)))


def _public(inputs: Inputs, rms: bool):
    """The backward as eager autograd runs it: `backward_rows` itself (torch.compile calls it through the op)."""
    k = len(inputs["normalized_shape"])
    return backward_rows(
        as_rows(inputs["dy"], k), as_rows(inputs["x"], k), flat(inputs["weight"]), flat(inputs["bias"]),
        inputs["dy"].new_empty(0, dtype=torch.float32) if rms else inputs["mean"], as_rows(inputs["dh"], k),
        inputs["eps"], rms,
    )


ROWS64_SOURCES = (round_to, _load64, _centered_wdy, _row_rstd, _dx, _store_dx, _norm_backward_kernel,
                  _sum_partials_kernel, SUM_TILE, SUM_MIN_COLS, SUM_MAX_PROGRAMS)
"""The first kernel's sources (kernel="rows64"): the specs' before the tiles kernel."""


def _spec(name: str, rms: bool) -> KernelSpec:
    return KernelSpec(
        name=name,
        space=BACKWARD_SPACE,
        launch=lambda inputs, config, out: _launch_spec(inputs, config, out, rms),
        reference=lambda inputs: _torch_grads(inputs, rms, torch.float64),
        baseline=lambda inputs: _torch_grads(inputs, rms, None),
        problems=lambda max_numel: problems_.problems(max_numel, rms=rms, backward=True),
        problems_for_config=lambda config, dtype, max_numel: problems_.problems_for_config(
            BACKWARD_SPACE, config, max_numel, rms=rms, backward=True),
        make_inputs=lambda problem, dtype, device, seed: make_inputs(problem, dtype, device, seed, rms),
        bucket=bucket,
        cost=lambda problem, dtype: problems_.backward_cost(problem, dtype, rms=rms),
        presets=[problems_.parse_shape(s, rms=rms) for s in ("8192x4096+res", "16384x8192+res", "8192x4096")],
        interpreter_presets=[problems_.parse_shape("8x300+res", rms=rms)],
        parse_shape=lambda text: problems_.parse_shape(text, rms=rms),
        sources=(*ROWS64_SOURCES, *tiles_.SOURCES, *early_.SOURCES, *ahead_.SOURCES),
        # The rows tuned before the tiles kernel: the first kernel alone, configs without kernel and BLOCK_M; those
        # tuned before the tiles_early kernel: the first two; and before the tiles_ahead kernel: the first three.
        extends=(
            EarlierSpace.before(BACKWARD_SPACE, ROWS64_SOURCES, new=BEFORE_TILES),
            EarlierSpace.before(BACKWARD_SPACE, (*ROWS64_SOURCES, *tiles_.SOURCES), kernel=BEFORE_TILES_EARLY),
            EarlierSpace.before(
                BACKWARD_SPACE, (*ROWS64_SOURCES, *tiles_.SOURCES, *early_.SOURCES), kernel=BEFORE_TILES_AHEAD
            ),
        ),
        description=("rms_norm" if rms else "layer_norm") + " backward: dx, dweight, dbias ('+res': plus the sum's gradient)",
        bucket_edges=lambda problem: problems_.bucket_edges(problem, rms=rms, backward=True),
        public=lambda inputs: _public(inputs, rms),
    )


LAYER_NORM_BACKWARD = _spec("layer_norm_backward", rms=False)
RMS_NORM_BACKWARD = _spec("rms_norm_backward", rms=True)
_TUNED = {False: runtime.tuned(LAYER_NORM_BACKWARD), True: runtime.tuned(RMS_NORM_BACKWARD)}
