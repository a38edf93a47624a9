"""group_norm's backward: dx, dweight, dbias of activation(group_norm(x)) from dy, x, weight, bias and
the statistics the forward saved (mean in float64, rstd in float32); the activation's input is
recomputed from them, never stored.

With dz = dy * activation'(z) and xhat = (x - mean) * rstd, per (sample, group) of `count` elements:
    dx = rstd * (w dz - (sum(w dz) + xhat * sum(w dz xhat)) / count)
and dweight, dbias are per-channel sums of dz * xhat and dz over samples and positions. Both group
sums come from the per-channel sums, so one reduction pass serves dx and the parameter gradients.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune import runtime
from autotune.kernels.common.grid import cdiv
from autotune.kernels.norm.group_norm_common import (
    ACTIVATIONS,
    INTERPRETER_PRESETS,
    PRESETS,
    accumulator,
    activation_grad,
    bucket_edges,
    channels_inner,
    cost,
    dense_like_torch,
    flat_strides,
    lookup_config,
    make_forward_inputs,
    outputs_in_x_format,
    parse_shape,
    problems,
    problems_for_config,
    reference_forward,
    spatial_size,
    with_layout,
)
from autotune.search_spaces.group_norm import BACKWARD_SPACE, bucket, bucket_distance, tile_shape
from autotune.space import next_pow2
from autotune.spec import Inputs, KernelSpec

REDUCE_BLOCK_ROWS = 16
REDUCE_BLOCK_C = 64


@triton.jit
def _channel_params(w_ptr, b_ptr, channels, c_mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr):
    """Weight and bias of a tile's channels as ACC vectors: 1 and 0 where absent or masked off."""
    if HAS_W:
        w = tl.load(w_ptr + channels, mask=c_mask, other=0.0).to(ACC)
    else:
        w = tl.where(c_mask, 1.0, 0.0).to(ACC)
    if HAS_B:
        b = tl.load(b_ptr + channels, mask=c_mask, other=0.0).to(ACC)
    else:
        b = tl.zeros_like(w)
    return w, b


@triton.jit
def _group_statistics(mean_ptr, rstd_ptr, row, ACC: tl.constexpr):
    """The forward's saved statistics of a group, mean and rstd, in ACC."""
    return tl.load(mean_ptr + row).to(ACC), tl.load(rstd_ptr + row).to(ACC)


@triton.jit
def _grad_tile(x, dy, mean, rstd, w, b, ACTIVATION: tl.constexpr):
    """xhat and dz = dy * activation'(xhat * w + b) of a tile (dz is 0 where dy was masked to 0)."""
    xhat = (x - mean) * rstd
    dz = dy
    if ACTIVATION != 0:
        dz = dy * activation_grad(xhat * w[:, None] + b[:, None], ACTIVATION)
    return xhat, dz


@triton.jit
def _store_param_sums(dw_ptr, db_ptr, row_offset, channels, c_mask, sum_dz_xhat, sum_dz, ATOMIC: tl.constexpr):
    """Per-channel sums: added atomically to (C,) totals, or stored in the partials row at row_offset."""
    if ATOMIC:
        tl.atomic_add(dw_ptr + channels, sum_dz_xhat, mask=c_mask)
        tl.atomic_add(db_ptr + channels, sum_dz, mask=c_mask)
    else:
        tl.store(dw_ptr + row_offset + channels, sum_dz_xhat, mask=c_mask)
        tl.store(db_ptr + row_offset + channels, sum_dz, mask=c_mask)


@triton.jit
def _group_norm_backward_single_kernel(
    dy_ptr, x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr,
    groups, cg, hw, channels_total,
    dy_sn, dy_sc, dy_ss, x_sn, x_sc, x_ss, dx_sn, dx_sc, dx_ss,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, PARAM_GRADS: tl.constexpr,
    ATOMIC: tl.constexpr, ACC: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """One (sample, group) per program, x and dy held whole in registers: one read of each, one write."""
    row = tl.program_id(0)
    n, first_channel = row // groups, (row % groups) * cg
    n64, c64 = n.to(tl.int64), first_channel.to(tl.int64)
    c = tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_HW)
    cs, ss = c[:, None], s[None, :]
    c_mask = c < cg
    mask = c_mask[:, None] & (ss < hw)
    x = tl.load(x_ptr + n64 * x_sn + c64 * x_sc + cs * x_sc + ss * x_ss, mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + n64 * dy_sn + c64 * dy_sc + cs * dy_sc + ss * dy_ss, mask=mask, other=0.0).to(ACC)
    w, b = _channel_params(w_ptr, b_ptr, first_channel + c, c_mask, HAS_W, HAS_B, ACC)
    mean, rstd = _group_statistics(mean_ptr, rstd_ptr, row, ACC)
    xhat, dz = _grad_tile(x, dy, mean, rstd, w, b, ACTIVATION)
    sum_dz_xhat = tl.sum(dz * xhat, axis=1)
    sum_dz = tl.sum(dz, axis=1)
    if PARAM_GRADS:
        _store_param_sums(dw_ptr, db_ptr, n64 * channels_total, first_channel + c, c_mask, sum_dz_xhat, sum_dz, ATOMIC)
    c1 = tl.sum(w * sum_dz_xhat)
    c2 = tl.sum(w * sum_dz)
    count = tl.cast(cg * hw, ACC)
    dx = rstd * (dz * w[:, None] - (c2 + xhat * c1) / count)
    tl.store(dx_ptr + n64 * dx_sn + c64 * dx_sc + cs * dx_sc + ss * dx_ss, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _group_norm_backward_sums_kernel(
    dy_ptr, x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr, group_sums_ptr,
    groups, cg, hw, chunk, channels_total,
    dy_sn, dy_sc, dy_ss, x_sn, x_sc, x_ss,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, PARAM_GRADS: tl.constexpr,
    ATOMIC: tl.constexpr, ACC: tl.constexpr, SPLIT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """SPLIT programs per (sample, group), each over positions [part * chunk, (part + 1) * chunk): the
    per-channel sums of dz * xhat and dz, and this part's share of the two group sums."""
    row = tl.program_id(0)
    part = tl.program_id(1)
    n, first_channel = row // groups, (row % groups) * cg
    n64, c64 = n.to(tl.int64), first_channel.to(tl.int64)
    x_group = x_ptr + n64 * x_sn + c64 * x_sc
    dy_group = dy_ptr + n64 * dy_sn + c64 * dy_sc
    mean, rstd = _group_statistics(mean_ptr, rstd_ptr, row, ACC)
    start = part * chunk
    end = tl.minimum(start + chunk, hw)
    c = tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_HW)
    c1 = tl.cast(0.0, ACC)
    c2 = tl.cast(0.0, ACC)
    for c0 in range(0, cg, BLOCK_C):
        c_mask = (c0 + c) < cg
        w, b = _channel_params(w_ptr, b_ptr, first_channel + c0 + c, c_mask, HAS_W, HAS_B, ACC)
        acc_dz_xhat = tl.zeros((BLOCK_C, BLOCK_HW), ACC)
        acc_dz = tl.zeros((BLOCK_C, BLOCK_HW), ACC)
        for s0 in range(start, end, BLOCK_HW):
            mask = c_mask[:, None] & ((s0 + s) < end)[None, :]
            x = tl.load(x_group + (c0 + c)[:, None] * x_sc + (s0 + s)[None, :] * x_ss, mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_group + (c0 + c)[:, None] * dy_sc + (s0 + s)[None, :] * dy_ss, mask=mask, other=0.0).to(ACC)
            xhat, dz = _grad_tile(x, dy, mean, rstd, w, b, ACTIVATION)
            acc_dz_xhat += dz * xhat
            acc_dz += dz
        sum_dz_xhat = tl.sum(acc_dz_xhat, axis=1)
        sum_dz = tl.sum(acc_dz, axis=1)
        if PARAM_GRADS:
            row_offset = (n64 * SPLIT + part) * channels_total
            _store_param_sums(dw_ptr, db_ptr, row_offset, first_channel + c0 + c, c_mask, sum_dz_xhat, sum_dz, ATOMIC)
        c1 += tl.sum(w * sum_dz_xhat)
        c2 += tl.sum(w * sum_dz)
    tl.store(group_sums_ptr + (row * SPLIT + part) * 2, c1)
    tl.store(group_sums_ptr + (row * SPLIT + part) * 2 + 1, c2)


@triton.jit
def _group_norm_backward_dx_kernel(
    dy_ptr, x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, dx_ptr, group_sums_ptr,
    groups, cg, hw, chunk,
    dy_sn, dy_sc, dy_ss, x_sn, x_sc, x_ss, dx_sn, dx_sc, dx_ss,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, ACC: tl.constexpr,
    SPLIT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """dx over this part's positions, from the group sums of all SPLIT parts."""
    row = tl.program_id(0)
    part = tl.program_id(1)
    n, first_channel = row // groups, (row % groups) * cg
    n64, c64 = n.to(tl.int64), first_channel.to(tl.int64)
    k = tl.arange(0, SPLIT)
    c1 = tl.sum(tl.load(group_sums_ptr + (row * SPLIT + k) * 2))
    c2 = tl.sum(tl.load(group_sums_ptr + (row * SPLIT + k) * 2 + 1))
    mean, rstd = _group_statistics(mean_ptr, rstd_ptr, row, ACC)
    count = tl.cast(cg * hw, ACC)
    start = part * chunk
    end = tl.minimum(start + chunk, hw)
    c = tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_HW)
    for c0 in range(0, cg, BLOCK_C):
        c_mask = (c0 + c) < cg
        w, b = _channel_params(w_ptr, b_ptr, first_channel + c0 + c, c_mask, HAS_W, HAS_B, ACC)
        for s0 in range(start, end, BLOCK_HW):
            mask = c_mask[:, None] & ((s0 + s) < end)[None, :]
            cs = (c0 + c)[:, None]
            ss = (s0 + s)[None, :]
            x = tl.load(x_ptr + n64 * x_sn + c64 * x_sc + cs * x_sc + ss * x_ss, mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_ptr + n64 * dy_sn + c64 * dy_sc + cs * dy_sc + ss * dy_ss, mask=mask, other=0.0).to(ACC)
            xhat, dz = _grad_tile(x, dy, mean, rstd, w, b, ACTIVATION)
            dx = (rstd * (dz * w[:, None] - (c2 + xhat * c1) / count)).to(dx_ptr.dtype.element_ty)
            tl.store(dx_ptr + n64 * dx_sn + c64 * dx_sc + cs * dx_sc + ss * dx_ss, dx, mask=mask)


@triton.jit
def _param_grad_reduce_kernel(
    dw_partial_ptr, db_partial_ptr, dw_ptr, db_ptr, rows, channels_total,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """dweight and dbias: the partial rows (one per sample and split part) summed per channel."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = cols < channels_total
    r = tl.arange(0, BLOCK_ROWS)
    acc_w = tl.zeros((BLOCK_ROWS, BLOCK_C), ACC)
    acc_b = tl.zeros((BLOCK_ROWS, BLOCK_C), ACC)
    for r0 in range(0, rows, BLOCK_ROWS):
        mask = ((r0 + r) < rows)[:, None] & c_mask[None, :]
        offsets = (r0 + r)[:, None].to(tl.int64) * channels_total + cols[None, :]
        acc_w += tl.load(dw_partial_ptr + offsets, mask=mask, other=0.0)
        acc_b += tl.load(db_partial_ptr + offsets, mask=mask, other=0.0)
    if HAS_W:
        tl.store(dw_ptr + cols, tl.sum(acc_w, axis=0).to(dw_ptr.dtype.element_ty), mask=c_mask)
    if HAS_B:
        tl.store(db_ptr + cols, tl.sum(acc_b, axis=0).to(db_ptr.dtype.element_ty), mask=c_mask)


def _launcher(dy, x, dx, groups: int, activation: str, has_weight: bool, has_bias: bool, config: dict):
    """A function (dy, x, weight, bias, mean, rstd, dx, dweight, dbias) that launches config on tensors of
    the shapes and strides of dy, x and dx (which must have flat_strides, numel > 0): dx, and dweight and
    dbias where weight and bias are given; mean (float64) and rstd (float32) contiguous (N, groups).
    Everything the shapes decide (strides, tiles, grids, compile-time arguments) is worked out here, once."""
    n, c = x.shape[:2]
    hw, cg, rows = spatial_size(x), c // groups, n * groups
    dys, xs, dxs = flat_strides(dy), flat_strides(x), flat_strides(dx)
    split = config["SPLIT"]
    block_c, block_hw = tile_shape(config["BLOCK"], cg, max(1, next_pow2(hw) // split), channels_inner(xs, c, hw))
    acc = accumulator(x.dtype)
    sums_dtype = torch.float64 if acc == tl.float64 else torch.float32
    param_grads = has_weight or has_bias
    atomic = config["REDUCE"] == "atomic"
    sums_shape = (c,) if atomic else (n * split, c)
    # Floating-point contraction off: where dx cancels exactly (a group of one element: rstd * (w dz - w dz)),
    # a fused multiply-add keeps the first product's rounding error instead of PyTorch's 0 (the interpreter never fuses).
    meta = dict(HAS_W=has_weight, HAS_B=has_bias, ACTIVATION=ACTIVATIONS[activation], ACC=acc,
                BLOCK_C=block_c, BLOCK_HW=block_hw, num_warps=config["num_warps"], num_stages=config["num_stages"],
                enable_fp_fusion=False)
    if config["variant"] == "single":
        single_kernel = _group_norm_backward_single_kernel[(rows,)]

        def launch_dx(dy, x, params, mean, rstd, dx, dw_sums, db_sums):
            single_kernel(dy, x, *params, mean, rstd, dx, dw_sums, db_sums, groups, cg, hw, c, *dys, *xs, *dxs,
                          PARAM_GRADS=param_grads, ATOMIC=atomic, **meta)
    else:
        chunk = cdiv(cdiv(hw, split), block_hw) * block_hw  # positions per part, whole tiles
        sums_kernel = _group_norm_backward_sums_kernel[(rows, split)]
        dx_kernel = _group_norm_backward_dx_kernel[(rows, split)]

        def launch_dx(dy, x, params, mean, rstd, dx, dw_sums, db_sums):
            group_sums = torch.empty((rows, split, 2), dtype=sums_dtype, device=x.device)
            sums_kernel(dy, x, *params, mean, rstd, dw_sums, db_sums, group_sums, groups, cg, hw, chunk, c, *dys, *xs,
                        PARAM_GRADS=param_grads, ATOMIC=atomic, SPLIT=split, **meta)
            dx_kernel(dy, x, *params, mean, rstd, dx, group_sums, groups, cg, hw, chunk, *dys, *xs, *dxs,
                      SPLIT=split, **meta)
    reduce_kernel = _param_grad_reduce_kernel[(cdiv(c, REDUCE_BLOCK_C),)]

    def launch(dy, x, weight, bias, mean, rstd, dx, dweight, dbias):
        params = (x if weight is None else weight, x if bias is None else bias)  # absent ones are never read
        if not param_grads:
            launch_dx(dy, x, params, mean, rstd, dx, rstd, rstd)  # the sums' placeholders stay unused
            return
        alloc = torch.zeros if atomic else torch.empty
        dw_sums = alloc(sums_shape, dtype=sums_dtype, device=x.device)
        db_sums = alloc(sums_shape, dtype=sums_dtype, device=x.device)
        launch_dx(dy, x, params, mean, rstd, dx, dw_sums, db_sums)
        if atomic:
            for grad, sums in ((dweight, dw_sums), (dbias, db_sums)):
                if grad is not None:
                    grad.copy_(sums)
            return
        reduce_kernel(dw_sums, db_sums, dw_sums if dweight is None else dweight, db_sums if dbias is None else dbias,
                      n * split, c, HAS_W=dweight is not None, HAS_B=dbias is not None, ACC=acc,
                      BLOCK_ROWS=REDUCE_BLOCK_ROWS, BLOCK_C=REDUCE_BLOCK_C, num_warps=4)
    return launch


def _launch(dy, x, weight, bias, mean, rstd, dx, dweight, dbias, groups: int, activation: str, config: dict) -> None:
    """dx (and dweight, dbias where weight, bias are given) with one config (see `_launcher`)."""
    _launcher(dy, x, dx, groups, activation, weight is not None, bias is not None, config)(
        dy, x, weight, bias, mean, rstd, dx, dweight, dbias)


def _run(dy, x, weight, bias, mean, rstd, dx, dweight, dbias, groups: int, activation: str, config: dict) -> None:
    """_launch for tensors of any strides: what cannot be read with one spatial stride goes through a copy
    (of dx, not fresh memory, so an element the kernel leaves unwritten keeps dx's value)."""
    if x.numel() == 0:
        for grad in (dweight, dbias):
            if grad is not None:
                grad.zero_()
        return
    dy_in = dy if flat_strides(dy) is not None else dy.contiguous()
    x_in = x if flat_strides(x) is not None else x.contiguous()
    dx_out = dx if flat_strides(dx) is not None else dx.contiguous()
    _launch(dy_in, x_in, weight, bias, mean.contiguous(), rstd.contiguous(), dx_out, dweight, dbias, groups,
            activation, config)
    if dx_out is not dx:
        dx.copy_(dx_out)


def launch(inputs: Inputs, config: dict, out: tuple) -> tuple:
    """(dx, [dweight], [dbias]) into `out` with one config: a gradient for each parameter given."""
    weight, bias = inputs["weight"], inputs["bias"]
    dweight = out[1] if weight is not None else None
    dbias = out[-1] if bias is not None else None
    _run(inputs["dy"], inputs["x"], weight, bias, inputs["mean"], inputs["rstd"], out[0], dweight, dbias,
         inputs["groups"], inputs["activation"], config)
    return out


def _present(*tensors):
    return tuple(t for t in tensors if t is not None)


def reference(inputs: Inputs) -> tuple:
    """Float64 autograd of the forward math, statistics recomputed from x in float64."""
    leaves = [None if t is None else t.detach().double().requires_grad_()
              for t in (inputs["x"], inputs["weight"], inputs["bias"])]
    y, _, _ = reference_forward(*leaves, inputs["groups"], inputs["eps"], inputs["activation"])
    return torch.autograd.grad(y, _present(*leaves), inputs["dy"].double())


def baseline(inputs: Inputs) -> tuple:
    """What PyTorch's own backward runs, from what its forward saved (in the working dtype)."""
    x, weight, z = dense_like_torch(inputs["x"]), inputs["weight"], inputs["activation_input"]
    dy = dense_like_torch(inputs["dy"], like=inputs["x"])
    # The statistics a correct forward saves, in the dtype PyTorch keeps them in; z was made from them.
    mean, rstd = inputs["mean"].to(x.dtype), inputs["rstd"].to(x.dtype)
    if inputs["activation"] == "silu":
        dy = torch.ops.aten.silu_backward(dy, z)
    elif inputs["activation"] == "mish":
        dy = torch.ops.aten.mish_backward(dy, z)
    n, c = x.shape[:2]
    has_bias = inputs["bias"] is not None
    # PyTorch's CPU kernel fails ("tensor does not have a device") asked for dbias without a weight,
    # and so does autograd of F.group_norm(x, g, None, bias); there dbias is the sum PyTorch would take.
    mask = [True, weight is not None, has_bias and weight is not None]
    dx, dweight, dbias = torch.ops.aten.native_group_norm_backward(
        dy, x, mean, rstd, weight, n, c, spatial_size(x), inputs["groups"], mask
    )
    if has_bias and weight is None:
        dbias = dy.sum(dim=[0, *range(2, dy.dim())])
    return _present(dx, dweight, dbias)


def make_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    """The forward's inputs, dy (in x's layout), the statistics a correct forward saves (the float64
    mean, float64 rstd rounded once to float32), and the activation's input as PyTorch's forward saves it."""
    inputs = make_forward_inputs(problem, dtype, device, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    dy = torch.randn(problem["shape"], generator=gen).to(device=device, dtype=dtype)
    x, groups = inputs["x"], inputs["groups"]
    _, mean, rstd = reference_forward(x, None, None, groups, inputs["eps"], "none")
    rstd = rstd.float()
    return {**inputs, "dy": with_layout(dy, problem.get("layout", "contiguous")), "mean": mean, "rstd": rstd,
            "activation_input": _activation_input(x, inputs["weight"], inputs["bias"], mean.float(), rstd)}


def _activation_input(x, weight, bias, mean, rstd) -> torch.Tensor:
    """z = affine((x - mean) * rstd) as PyTorch's forward would save it with these statistics: computed
    in float32, rounded once to x's dtype."""
    n, c = x.shape[:2]
    per_channel = (1, c) + (1,) * (x.dim() - 2)
    xhat = ((x.float().reshape(n, mean.shape[1], -1) - mean[..., None]) * rstd[..., None]).reshape(x.shape)
    z = xhat * (1.0 if weight is None else weight.float().view(per_channel))
    z = z + (0.0 if bias is None else bias.float().view(per_channel))
    return dense_like_torch(z.to(x.dtype))


SPEC = KernelSpec(
    name="group_norm_backward",
    space=BACKWARD_SPACE,
    launch=launch,
    reference=reference,
    baseline=baseline,
    problems=problems,
    problems_for_config=lambda config, dtype, max_numel: problems_for_config(BACKWARD_SPACE, config, max_numel),
    make_inputs=make_inputs,
    bucket=bucket,
    distance=bucket_distance,
    cost=lambda problem, dtype: cost(problem, dtype, streams=3, param_passes=2, flops_per_element=20),
    presets=PRESETS,
    interpreter_presets=INTERPRETER_PRESETS,
    parse_shape=parse_shape,
    sources=(_channel_params, _group_statistics, _grad_tile, _store_param_sums, activation_grad,
             _group_norm_backward_single_kernel,
             _group_norm_backward_sums_kernel, _group_norm_backward_dx_kernel, _param_grad_reduce_kernel),
    description="group_norm's backward: (dx, dweight, dbias) from dy, x and the forward's saved statistics",
    bucket_edges=bucket_edges,
    outputs=outputs_in_x_format,
    public=lambda inputs: backward(inputs["dy"], inputs["x"], inputs["weight"], inputs["bias"], inputs["mean"],
                                   inputs["rstd"], inputs["groups"], inputs["activation"]),
)

_TUNED = runtime.tuned(SPEC)


def _plan(dy, x, dx, groups: int, activation: str, has_weight: bool, has_bias: bool):
    """(config, launcher) of a call on dy, x into dx, or False where their spatial dims go through copies."""
    config = lookup_config(_TUNED, x, groups, activation)
    if flat_strides(dy) is None or flat_strides(x) is None or flat_strides(dx) is None:
        return False
    return config, _launcher(dy, x, dx, groups, activation, has_weight, has_bias, config)


def backward(dy, x, weight, bias, mean, rstd, groups: int, activation: str):
    """(dx, dweight, dbias) with the tuned config, from the statistics the forward saved (mean float64,
    rstd float32, both (N, groups)); a gradient for an absent parameter is an empty tensor."""
    dx = torch.empty_like(x)
    dweight = torch.empty_like(weight) if weight is not None else None
    dbias = torch.empty_like(bias) if bias is not None else None
    if x.numel():
        # Planned once per call shape: empty_like gives dx the same strides for the same x.
        has_weight, has_bias = weight is not None, bias is not None
        plan = _TUNED.derived((x.dtype, x.shape, x.stride(), dy.stride(), groups, activation, has_weight,
                               has_bias), lambda: _plan(dy, x, dx, groups, activation, has_weight, has_bias))
        if plan:
            config, launch = plan
            runtime.note_launch(SPEC.name, config)
            launch(dy, x, weight, bias, mean.contiguous(), rstd.contiguous(), dx, dweight, dbias)
        else:
            config = lookup_config(_TUNED, x, groups, activation)
            runtime.note_launch(SPEC.name, config)
            _run(dy, x, weight, bias, mean, rstd, dx, dweight, dbias, groups, activation, config)
    else:
        _run(dy, x, weight, bias, mean, rstd, dx, dweight, dbias, groups, activation, None)
    return dx, x.new_empty(0) if dweight is None else dweight, x.new_empty(0) if dbias is None else dbias


@torch.library.custom_op(
    "autotune::group_norm_backward", mutates_args=(),
    schema="(Tensor dy, Tensor x, Tensor? weight, Tensor? bias, Tensor mean, Tensor rstd, int groups, str activation)"
           " -> (Tensor, Tensor, Tensor)",
)
def _backward_op(dy, x, weight, bias, mean, rstd, groups, activation):
    return backward(dy, x, weight, bias, mean, rstd, groups, activation)


@_backward_op.register_fake
def _(dy, x, weight, bias, mean, rstd, groups, activation):
    return (torch.empty_like(x), x.new_empty(0) if weight is None else torch.empty_like(weight),
            x.new_empty(0) if bias is None else torch.empty_like(bias))
