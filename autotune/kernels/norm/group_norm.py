"""group_norm: torch.nn.functional.group_norm with a fused activation (silu, mish), any layout, with
tuned forward and backward kernels; a torch custom op, so torch.compile(fullgraph=True) keeps it whole.
The forward's "cached" variant is `group_norm_cached`'s kernel, its "onepass" variant `group_norm_onepass`'s."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune import runtime
from autotune.kernels.common import checks as _checks
from autotune.kernels.common import launch as launch_
from autotune.kernels.common import second_order as _second_order
from autotune.kernels.common.grid import cdiv
from autotune.kernels.norm import group_norm_backward  # also registers the backward op
from autotune.kernels.norm import group_norm_cached as cached_
from autotune.kernels.norm import group_norm_onepass as onepass_
from autotune.kernels.norm.checks import group_norm_arguments
from autotune.kernels.norm.group_moments import STAT, _chan_combine, _finish, _tile_moments
from autotune.kernels.norm.group_norm_common import (
    ACTIVATIONS,
    INTERPRETER_PRESETS,
    PRESETS,
    accumulator,
    activate,
    affine,
    apply_activation,
    bucket_edges,
    channels_inner,
    check_span,
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
)
from autotune.kernels.norm.reference import group_norm_gradients
from autotune.search_spaces.group_norm import (
    CACHED_VARIANTS,
    FIRST_VARIANTS,
    SPACE,
    bucket,
    bucket_distance,
    tile_shape,
)
from autotune.space import next_pow2
from autotune.spec import EarlierSpace, Inputs, KernelSpec


@triton.jit
def _group_norm_single_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
    groups, cg, hw, eps,
    x_sn, x_sc, x_ss, y_sn, y_sc, y_ss,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, ACC: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """One (sample, group) per program, held whole in registers: one read, one write per element."""
    row = tl.program_id(0)
    n, first_channel = row // groups, (row % groups) * cg
    x_group = x_ptr + n.to(tl.int64) * x_sn + first_channel.to(tl.int64) * x_sc
    c = tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_HW)
    c_mask = c < cg
    mask = c_mask[:, None] & (s < hw)[None, :]
    pivot = tl.load(x_group).to(STAT)
    x = tl.load(x_group + c[:, None] * x_sc + s[None, :] * x_ss, mask=mask, other=0.0)
    count = tl.cast(cg * hw, STAT)
    mean_d, m2 = _tile_moments(tl.where(mask, x.to(ACC) - pivot.to(ACC), 0.0), mask, count)
    mean, rstd = _finish(pivot, mean_d, m2, count, eps)
    xhat = (x.to(ACC) - mean.to(ACC)) * rstd.to(ACC)
    y = activate(affine(xhat, w_ptr, b_ptr, first_channel + c, c_mask, HAS_W, HAS_B), ACTIVATION)
    y_tile = y_ptr + n.to(tl.int64) * y_sn + first_channel.to(tl.int64) * y_sc + c[:, None] * y_sc + s[None, :] * y_ss
    tl.store(y_tile, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean.to(tl.float64))
    tl.store(rstd_ptr + row, rstd.to(tl.float32))


@triton.jit
def _group_moments(
    x_ptr, pivot, cg, hw_start, hw_end, x_sc, x_ss, ACC: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """Count, mean and sum of squared deviations (in STAT) of x - pivot over channels [0, cg) x positions
    [hw_start, hw_end) from x_ptr, a tile at a time in ACC (see `_tile_moments`), combined with Chan's update."""
    c = tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_HW)
    seen = tl.cast(0.0, STAT)
    mean = tl.cast(0.0, STAT)
    m2 = tl.cast(0.0, STAT)
    shift = pivot.to(ACC)
    for c0 in range(0, cg, BLOCK_C):
        c_mask = (c0 + c) < cg
        for s0 in range(hw_start, hw_end, BLOCK_HW):
            mask = c_mask[:, None] & ((s0 + s) < hw_end)[None, :]
            x = tl.load(x_ptr + (c0 + c)[:, None] * x_sc + (s0 + s)[None, :] * x_ss, mask=mask, other=0.0).to(ACC)
            tile_count = (tl.minimum(cg - c0, BLOCK_C) * tl.minimum(hw_end - s0, BLOCK_HW)).to(STAT)
            tile_mean, tile_m2 = _tile_moments(tl.where(mask, x - shift, 0.0), mask, tile_count)
            seen, mean, m2 = _chan_combine(seen, mean, m2, tile_count, tile_mean, tile_m2)
    return seen, mean, m2


@triton.jit
def _normalize_range(
    x_ptr, y_ptr, w_ptr, b_ptr, first_channel, cg, hw_start, hw_end, mean, rstd,
    x_sc, x_ss, y_sc, y_ss, HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, ACC: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """y = activation(affine((x - mean) * rstd)) over channels [0, cg) x positions [hw_start, hw_end)."""
    c = tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_HW)
    for c0 in range(0, cg, BLOCK_C):
        c_mask = (c0 + c) < cg
        for s0 in range(hw_start, hw_end, BLOCK_HW):
            mask = c_mask[:, None] & ((s0 + s) < hw_end)[None, :]
            x = tl.load(x_ptr + (c0 + c)[:, None] * x_sc + (s0 + s)[None, :] * x_ss, mask=mask, other=0.0).to(ACC)
            z = affine((x - mean) * rstd, w_ptr, b_ptr, first_channel + c0 + c, c_mask, HAS_W, HAS_B)
            y = activate(z, ACTIVATION).to(y_ptr.dtype.element_ty)
            tl.store(y_ptr + (c0 + c)[:, None] * y_sc + (s0 + s)[None, :] * y_ss, y, mask=mask)


@triton.jit
def _group_norm_looped_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
    groups, cg, hw, eps,
    x_sn, x_sc, x_ss, y_sn, y_sc, y_ss,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, ACC: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """One (sample, group) per program in tiles: a statistics pass, then a normalize pass."""
    row = tl.program_id(0)
    n, first_channel = row // groups, (row % groups) * cg
    x_group = x_ptr + n.to(tl.int64) * x_sn + first_channel.to(tl.int64) * x_sc
    y_group = y_ptr + n.to(tl.int64) * y_sn + first_channel.to(tl.int64) * y_sc
    pivot = tl.load(x_group).to(STAT)
    count, mean_d, m2 = _group_moments(x_group, pivot, cg, 0, hw, x_sc, x_ss, ACC, BLOCK_C, BLOCK_HW)
    mean, rstd = _finish(pivot, mean_d, m2, count, eps)
    _normalize_range(x_group, y_group, w_ptr, b_ptr, first_channel, cg, 0, hw, mean.to(ACC), rstd.to(ACC),
                     x_sc, x_ss, y_sc, y_ss, HAS_W, HAS_B, ACTIVATION, ACC, BLOCK_C, BLOCK_HW)
    tl.store(mean_ptr + row, mean.to(tl.float64))
    tl.store(rstd_ptr + row, rstd.to(tl.float32))


@triton.jit
def _group_norm_split_stats_kernel(
    x_ptr, partial_ptr, groups, cg, hw, chunk, x_sn, x_sc, x_ss,
    ACC: tl.constexpr, SPLIT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """SPLIT programs per (sample, group), each writing the mean and squared deviations of x - pivot
    over its positions [part * chunk, (part + 1) * chunk), in STAT."""
    row = tl.program_id(0)
    part = tl.program_id(1)
    n, first_channel = row // groups, (row % groups) * cg
    x_group = x_ptr + n.to(tl.int64) * x_sn + first_channel.to(tl.int64) * x_sc
    pivot = tl.load(x_group).to(STAT)
    start = part * chunk
    _, mean_d, m2 = _group_moments(x_group, pivot, cg, start, tl.minimum(start + chunk, hw), x_sc, x_ss,
                                   ACC, BLOCK_C, BLOCK_HW)
    tl.store(partial_ptr + (row * SPLIT + part) * 2, mean_d)
    tl.store(partial_ptr + (row * SPLIT + part) * 2 + 1, m2)


@triton.jit
def _group_norm_split_normalize_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, partial_ptr,
    groups, cg, hw, chunk, eps,
    x_sn, x_sc, x_ss, y_sn, y_sc, y_ss,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACTIVATION: tl.constexpr, ACC: tl.constexpr,
    SPLIT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """Every split program combines its group's partials (Chan's formula for many parts, in one order,
    so all get the same result) and normalizes its own positions; the first stores the statistics."""
    row = tl.program_id(0)
    part = tl.program_id(1)
    n, first_channel = row // groups, (row % groups) * cg
    x_group = x_ptr + n.to(tl.int64) * x_sn + first_channel.to(tl.int64) * x_sc
    y_group = y_ptr + n.to(tl.int64) * y_sn + first_channel.to(tl.int64) * y_sc
    k = tl.arange(0, SPLIT)
    k_start = k * chunk
    k_count = (tl.maximum(tl.minimum(k_start + chunk, hw) - k_start, 0) * cg).to(STAT)
    means = tl.load(partial_ptr + (row * SPLIT + k) * 2)
    m2s = tl.load(partial_ptr + (row * SPLIT + k) * 2 + 1)
    count = tl.cast(cg * hw, STAT)
    mean_d = tl.sum(k_count * means) / count
    m2 = tl.sum(m2s) + tl.sum(k_count * (means - mean_d) * (means - mean_d))
    mean, rstd = _finish(tl.load(x_group).to(STAT), mean_d, m2, count, eps)
    start = part * chunk
    _normalize_range(x_group, y_group, w_ptr, b_ptr, first_channel, cg, start, tl.minimum(start + chunk, hw),
                     mean.to(ACC), rstd.to(ACC), x_sc, x_ss, y_sc, y_ss, HAS_W, HAS_B, ACTIVATION, ACC, BLOCK_C, BLOCK_HW)
    if part == 0:
        tl.store(mean_ptr + row, mean.to(tl.float64))
        tl.store(rstd_ptr + row, rstd.to(tl.float32))


def _launcher(x, y, groups: int, activation: str, has_weight: bool, has_bias: bool, config: dict,
              prebound: bool = False):
    """A function (x, y, weight, bias, mean, rstd, eps) that launches config on tensors of the shape and
    strides of x and y (which must have flat_strides, numel > 0); mean is float64, rstd float32, both
    (N, groups) contiguous. Everything the shapes decide is worked out here, once. prebound: a launcher kept
    for later calls (a plan), launched as `launch.planned` says."""
    n, c = x.shape[:2]
    hw, cg, rows = spatial_size(x), c // groups, n * groups
    strides = (*flat_strides(x), *flat_strides(y))
    split = config["SPLIT"]
    block_c, block_hw = tile_shape(config["BLOCK"], cg, max(1, next_pow2(hw) // split),
                                   channels_inner(strides[:3], c, hw))
    meta = dict(HAS_W=has_weight, HAS_B=has_bias, ACTIVATION=ACTIVATIONS[activation], ACC=accumulator(x.dtype),
                BLOCK_C=block_c, BLOCK_HW=block_hw, num_warps=config["num_warps"], num_stages=config["num_stages"])
    whole_group = {"single": _group_norm_single_kernel, "looped": _group_norm_looped_kernel,
                   "cached": cached_._group_norm_cached_kernel, "onepass": onepass_._group_norm_onepass_kernel}
    if config["variant"] in whole_group:
        jit = whole_group[config["variant"]]
        kernel = launch_.planned(jit, (rows,)) if prebound else jit[(rows,)]

        def launch(x, y, weight, bias, mean, rstd, eps):
            # Absent parameters are never read; x stands in as a valid pointer.
            kernel(x, y, x if weight is None else weight, x if bias is None else bias, mean, rstd,
                   groups, cg, hw, eps, *strides, **meta)
        return launch
    chunk = cdiv(cdiv(hw, split), block_hw) * block_hw
    stats_kernel = _group_norm_split_stats_kernel[(rows, split)]
    normalize_kernel = _group_norm_split_normalize_kernel[(rows, split)]

    def launch_split(x, y, weight, bias, mean, rstd, eps):
        partials = torch.empty((rows, split, 2), dtype=torch.float64, device=x.device)
        stats_kernel(x, partials, groups, cg, hw, chunk, *strides[:3], ACC=meta["ACC"], SPLIT=split, BLOCK_C=block_c,
                     BLOCK_HW=block_hw, num_warps=config["num_warps"], num_stages=config["num_stages"])
        normalize_kernel(x, y, x if weight is None else weight, x if bias is None else bias, mean, rstd, partials,
                         groups, cg, hw, chunk, eps, *strides, SPLIT=split, **meta)
    return launch_split


def _launch(x, y, weight, bias, mean, rstd, groups: int, eps: float, activation: str, config: dict) -> None:
    """y and the saved statistics of group_norm(x) with one config (see `_launcher`)."""
    _launcher(x, y, groups, activation, weight is not None, bias is not None, config)(x, y, weight, bias, mean, rstd, eps)


def _run(x, y, mean, rstd, weight, bias, groups: int, eps: float, activation: str, config: dict) -> None:
    """_launch for tensors of any strides: spatial dims that cannot be read as one go through a copy
    (of y, not fresh memory, so an element the kernel leaves unwritten keeps y's value)."""
    if x.numel() == 0:
        return
    x_in = x if flat_strides(x) is not None else x.contiguous()
    y_out = y if flat_strides(y) is not None else y.contiguous()
    _launch(x_in, y_out, weight, bias, mean, rstd, groups, eps, activation, config)
    if y_out is not y:
        y.copy_(y_out)


def launch(inputs: Inputs, config: dict, out: tuple) -> tuple:
    """(y, mean, rstd) of inputs into `out` with one config."""
    y, mean, rstd = out
    _run(inputs["x"], y, mean, rstd, inputs["weight"], inputs["bias"], inputs["groups"], inputs["eps"],
         inputs["activation"], config)
    return out


def reference(inputs: Inputs) -> tuple:
    return reference_forward(inputs["x"], inputs["weight"], inputs["bias"], inputs["groups"], inputs["eps"],
                             inputs["activation"])


def baseline(inputs: Inputs) -> tuple:
    """What PyTorch runs for F.group_norm (a copy where x is not dense in its own memory format, then
    native_group_norm), then the activation; its statistics in the dtypes ours are saved in."""
    x = dense_like_torch(inputs["x"])
    n, c = x.shape[:2]
    y, mean, rstd = torch.ops.aten.native_group_norm(
        x, inputs["weight"], inputs["bias"], n, c, spatial_size(x), inputs["groups"], inputs["eps"]
    )
    return apply_activation(y, inputs["activation"]), mean.double(), rstd.float()


FIRST_SOURCES = (_tile_moments, _chan_combine, _finish, _group_moments, _normalize_range, activate, affine,
                 _group_norm_single_kernel, _group_norm_looped_kernel, _group_norm_split_stats_kernel,
                 _group_norm_split_normalize_kernel)
"""The sources of the single, looped and split variants: the spec's before the cached one."""

SPEC = KernelSpec(
    name="group_norm",
    space=SPACE,
    launch=launch,
    reference=reference,
    baseline=baseline,
    problems=problems,
    problems_for_config=lambda config, dtype, max_numel: problems_for_config(SPACE, config, max_numel),
    make_inputs=make_forward_inputs,
    bucket=bucket,
    distance=bucket_distance,
    cost=lambda problem, dtype: cost(problem, dtype, streams=2, param_passes=1, flops_per_element=10),
    presets=PRESETS,
    interpreter_presets=INTERPRETER_PRESETS,
    parse_shape=parse_shape,
    sources=(*FIRST_SOURCES, *cached_.SOURCES, *onepass_.SOURCES),
    # The rows tuned before the cached kernel (the first three variants' kernels alone), then before the onepass one.
    extends=(
        EarlierSpace.before(SPACE, FIRST_SOURCES, variant=FIRST_VARIANTS),
        EarlierSpace.before(SPACE, (*FIRST_SOURCES, *cached_.SOURCES), variant=CACHED_VARIANTS),
    ),
    description="group_norm with a fused activation (F.group_norm + F.silu / F.mish); outputs y, mean, rstd",
    bucket_edges=bucket_edges,
    outputs=outputs_in_x_format,
    public=lambda inputs: group_norm(inputs["x"], inputs["groups"], inputs["weight"], inputs["bias"],
                                     inputs["eps"], None if inputs["activation"] == "none" else inputs["activation"]),
)

_TUNED = runtime.tuned(SPEC)


def _plan(x, y, groups: int, activation: str, has_weight: bool, has_bias: bool):
    """(config, launcher) of a call on x into y, or False where their spatial dims go through copies;
    ValueError if a sample of x spans too much (decided by the shape and strides, like the plan)."""
    check_span(x)
    config = lookup_config(_TUNED, x, groups, activation)
    if flat_strides(x) is None or flat_strides(y) is None:
        return False
    return config, _launcher(x, y, groups, activation, has_weight, has_bias, config, prebound=True)


def _forward(x, weight, bias, groups: int, eps: float, activation: str):
    """(y, mean, rstd) with the tuned config: y in x's memory format; the statistics (N, groups), the
    mean in float64 (see `accumulator` for why), rstd in float32."""
    y = torch.empty_like(x)
    stats = torch.empty if x.numel() else torch.zeros  # the kernels write every group's statistics
    mean = stats((x.shape[0], groups), dtype=torch.float64, device=x.device)
    rstd = stats((x.shape[0], groups), dtype=torch.float32, device=x.device)
    if x.numel():
        # Planned (and the span checked) once per call shape: empty_like gives y the same strides for
        # the same x.
        has_weight, has_bias = weight is not None, bias is not None
        plan = _TUNED.derived((x.dtype, x.shape, x.stride(), groups, activation, has_weight, has_bias),
                              lambda: _plan(x, y, groups, activation, has_weight, has_bias))
        if plan:
            config, launch = plan
            runtime.note_launch(SPEC.name, config)
            launch(x, y, weight, bias, mean, rstd, eps)
        else:
            config = lookup_config(_TUNED, x, groups, activation)
            runtime.note_launch(SPEC.name, config)
            _run(x, y, mean, rstd, weight, bias, groups, eps, activation, config)
    return y, mean, rstd


@torch.library.custom_op(
    "autotune::group_norm_forward", mutates_args=(),
    schema="(Tensor x, Tensor? weight, Tensor? bias, int groups, float eps, str activation)"
           " -> (Tensor, Tensor, Tensor)",
)
def _forward_op(x, weight, bias, groups, eps, activation):
    return _forward(x, weight, bias, groups, eps, activation)


@_forward_op.register_fake
def _(x, weight, bias, groups, eps, activation):
    return (torch.empty_like(x), x.new_empty((x.shape[0], groups), dtype=torch.float64),
            x.new_empty((x.shape[0], groups), dtype=torch.float32))


def _setup_context(ctx, inputs, output):
    x, weight, bias, groups, eps, activation = inputs
    _, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.groups, ctx.eps, ctx.activation = groups, eps, activation


def _backward_of_forward(ctx, dy, _dmean, _drstd):
    """The forward op's backward, through the backward op: what torch.compile traces."""
    return _gradients(ctx, torch.ops.autotune.group_norm_backward, dy)


def _gradients(ctx, backward, dy):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    if _second_order.recording():
        return (*group_norm_gradients(dy, x, weight, bias, ctx.groups, ctx.eps, ctx.activation), None, None, None)
    dx, dweight, dbias = backward(dy, x, weight, bias, mean, rstd, ctx.groups, ctx.activation)
    return dx, dweight if weight is not None else None, dbias if bias is not None else None, None, None, None


_forward_op.register_autograd(_backward_of_forward, setup_context=_setup_context)


class _GroupNormFunction(torch.autograd.Function):
    """The custom op's autograd without its dispatch, for eager calls: the same forward, saved context
    and backward (torch.compile traces the custom op)."""

    @staticmethod
    def forward(ctx, x, weight, bias, groups: int, eps: float, activation: str):
        output = _forward(x, weight, bias, groups, eps, activation)
        _setup_context(ctx, (x, weight, bias, groups, eps, activation), output)
        return output

    @staticmethod
    def backward(ctx, dy, _dmean, _drstd):
        return _gradients(ctx, group_norm_backward.backward, dy)  # the same kernels, without the op's dispatch


def group_norm(
    x: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    activation: str | None = None,
) -> torch.Tensor:
    """activation(F.group_norm(x, num_groups, weight, bias, eps)) with tuned kernels, for x of shape
    (N, C, *) in any layout; y has x's memory format (channels_last stays channels_last).

    Args:
        activation: None, "silu" or "mish", applied after the affine step (the diffusion U-Net pattern).

    Differentiable in x, weight and bias through tuned backward kernels; a backward recorded for second-order
    gradients (create_graph=True) runs torch's group_norm instead. A torch custom op, so it works inside
    torch.compile(fullgraph=True).
    """
    num_groups = group_norm_arguments(x, num_groups, weight, bias, eps, activation)
    act = activation or "none"
    eager = not torch.compiler.is_compiling() and type(x) in _checks.EAGER_TYPES
    if not (eager and x.numel()):
        check_span(x)  # eager calls on data check it where they plan the launch, once per call shape
    if not eager:
        return _forward_op(x, weight, bias, num_groups, float(eps), act)[0]  # what torch.compile traces
    if torch.is_grad_enabled() and (x.requires_grad or weight is not None and weight.requires_grad
                                    or bias is not None and bias.requires_grad):
        return _GroupNormFunction.apply(x, weight, bias, num_groups, float(eps), act)[0]
    return _forward(x, weight, bias, num_groups, float(eps), act)[0]  # no graph to record
