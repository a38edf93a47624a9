"""What group_norm's forward and backward share: the fused activations (Triton), how a tensor's layout
becomes three strides, the problems both are verified on, and the float64 math they are judged against."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from hypothesis import strategies as st

from autotune.gate.strategies import (
    class_floor,
    edge_sizes,
    factorizations,
    magnitudes,
    next_pow2,
    pow2_classes,
    sizes,
    sizes_in_classes,
)
from autotune.search_spaces.group_norm import bucket, group_shape
from autotune.space import Config, SearchSpace
from autotune.spec import Cost, parse_sizes

ACTIVATIONS = {"none": 0, "silu": 1, "mish": 2}
"""Activation name -> the ACTIVATION constexpr of the kernels."""

MAX_SPAN = 2**31
"""Kernels address a sample with int32 offsets: its elements must lie within 2**31 of its start."""


@triton.jit
def _sigmoid_parts(z):
    """u = exp(-|z|) and sigmoid(z), without overflow: z >= 0 gives 1 / (1 + u), z < 0 gives u / (1 + u)."""
    u = tl.exp(-tl.abs(z))
    return u, tl.where(z >= 0, 1.0, u) / (1.0 + u)


@triton.jit
def _tanh_softplus_parts(z, u):
    """tanh(softplus(z)) and 1 - tanh(softplus(z)), from u = exp(-|z|).

    With t = exp(z), tanh(log(1 + t)) = t(t + 2) / (t(t + 2) + 2); dividing through by t**2 for z >= 0
    gives (1 + 2u) / (1 + 2u + 2u**2). Both forms only add positive terms, so neither overflows for
    large |z| nor cancels: exp(z) never appears, and log1p(exp(z)) is never rounded to 0 for z << 0.
    """
    near = u * (u + 2.0)
    denominator = tl.where(z >= 0, 1.0 + 2.0 * u + 2.0 * u * u, near + 2.0)
    tanh_sp = tl.where(z >= 0, 1.0 + 2.0 * u, near) / denominator
    one_minus = tl.where(z >= 0, 2.0 * u * u, 2.0) / denominator
    return tanh_sp, one_minus


@triton.jit
def activate(z, ACTIVATION: tl.constexpr):
    """The fused activation of z: 0 none, 1 silu (z * sigmoid(z)), 2 mish (z * tanh(softplus(z)))."""
    if ACTIVATION == 1:
        _, sig = _sigmoid_parts(z)
        z = z * sig
    elif ACTIVATION == 2:
        u, _ = _sigmoid_parts(z)
        tanh_sp, _ = _tanh_softplus_parts(z, u)
        z = z * tanh_sp
    return z


@triton.jit
def activation_grad(z, ACTIVATION: tl.constexpr):
    """d activate(z) / dz for ACTIVATION 1 (silu) or 2 (mish)."""
    u, sig = _sigmoid_parts(z)
    if ACTIVATION == 1:
        # 1 - sigmoid(z) = sigmoid(-z), formed without cancellation
        grad = sig * (1.0 + z * tl.where(z >= 0, u, 1.0) / (1.0 + u))
    else:
        tanh_sp, one_minus = _tanh_softplus_parts(z, u)
        grad = tanh_sp + z * sig * one_minus * (1.0 + tanh_sp)
    return grad


@triton.jit
def affine(xhat, w_ptr, b_ptr, channels, channel_mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """xhat * weight + bias on a [BLOCK_C, BLOCK_HW] tile, for the channels of its rows, in xhat's dtype."""
    z = xhat
    if HAS_W:
        z = z * tl.load(w_ptr + channels, mask=channel_mask, other=1.0).to(xhat.dtype)[:, None]
    if HAS_B:
        z = z + tl.load(b_ptr + channels, mask=channel_mask, other=0.0).to(xhat.dtype)[:, None]
    return z


def flat_strides(t: torch.Tensor) -> tuple[int, int, int] | None:
    """(sample, channel, position) strides of an (N, C, *spatial) tensor with its spatial dims read as
    one; None where they cannot be (a spatial dim strided against the order of the others)."""
    inner = expected = None
    for size, stride in zip(reversed(t.shape[2:]), reversed(t.stride()[2:])):
        if size == 1:
            continue
        if inner is None:
            inner = stride
        elif stride != expected:
            return None
        expected = stride * size
    return t.stride(0), t.stride(1), 1 if inner is None else inner


def channels_inner(strides: tuple[int, int, int], c: int, hw: int) -> bool:
    """Whether a group's channels are its fastest-moving index in memory (channels_last)."""
    return hw > 1 and c > 1 and strides[1] < strides[2]


def check_span(t: torch.Tensor) -> None:
    """ValueError unless each sample of t lies within MAX_SPAN elements of its start."""
    if sum((size - 1) * stride for size, stride in zip(t.shape[1:], t.stride()[1:])) >= MAX_SPAN:
        raise ValueError(f"group_norm supports samples spanning fewer than 2**31 elements, got shape {tuple(t.shape)}")


def spatial_size(t: torch.Tensor) -> int:
    return math.prod(t.shape[2:])


def torch_format(t: torch.Tensor) -> torch.memory_format:
    """The memory format PyTorch's group_norm works in for t: on the CPU channels_last where t is dense in
    it; on CUDA always contiguous (aten's group_norm copies other layouts before native_group_norm)."""
    if t.device.type != "cpu":
        return torch.contiguous_format
    for fmt, rank in ((torch.channels_last, 4), (torch.channels_last_3d, 5)):
        if t.dim() == rank and not t.is_contiguous() and t.is_contiguous(memory_format=fmt):
            return fmt
    return torch.contiguous_format


def outputs_in_x_format(inputs: dict, base: tuple) -> tuple:
    """A launch's outputs as the public functions allocate them (`KernelSpec.outputs`): the first (y, or dx) by
    torch.empty_like(x), so in x's memory format (channels-last in, channels-last out); the others shaped like the
    baseline's."""
    return (torch.empty_like(inputs["x"]), *(t.new_empty(t.shape) for t in base[1:]))


def dense_like_torch(t: torch.Tensor, like: torch.Tensor | None = None) -> torch.Tensor:
    """t as PyTorch's group_norm reads it (of `like`, if given): dense in that memory format."""
    return t.contiguous(memory_format=torch_format(t if like is None else like))


def apply_activation(y: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "silu":
        return F.silu(y)
    if activation == "mish":
        return F.mish(y)
    return y


def accumulator(dtype: torch.dtype):
    """The dtype kernels compute in (ACC). Outputs can be small differences of large terms: x - mean for
    x near the mean of a group offset far from 0, dx where the group sums nearly cancel. For float32
    data float32 arithmetic cannot resolve them as finely as PyTorch happens to on some elements, and
    the gate (rightly) fails it there; float64 can. For 16-bit data float32 is ample: the data's own
    resolution is 2**13 times coarser. The mean is saved in float64 for the same reason: rounded to
    float32 it would be off by half an ulp of 1e4 for data spread by 1 around 1e4."""
    return tl.float64 if dtype == torch.float32 else tl.float32


PROBE_GROUPS = 1 << 16
"""Groups of the problems that probe which group sizes a config runs on."""


def problems_for_config(space: SearchSpace, config: Config, max_numel: int) -> st.SearchStrategy[dict]:
    """`problems` with groups whose (channels, spatial size) lie in the power-of-two classes the config runs
    on (the space's constraints depend on them only through those classes: single holds one tile size)."""
    most_cg = min(MOST_CHANNELS_PER_GROUP, max_numel)

    def fits(cg: int, hw: int) -> bool:
        return space.rejects(config, {"shape": [PROBE_GROUPS, cg, hw], "groups": 1, "layout": "contiguous"}) is None

    every = [(a, b) for a in pow2_classes(lambda c: True, most_cg) for b in pow2_classes(lambda h: True, max_numel)
             if class_floor(a) * class_floor(b) <= max_numel]
    classes = [(a, b) for a, b in every if fits(2**a, 2**b)]
    if not classes or len(classes) == len(every):
        return problems(max_numel)

    def group_sizes(a: int, b: int) -> st.SearchStrategy[tuple[int, int]]:
        return sizes_in_classes([a], min(most_cg, max_numel // class_floor(b))).flatmap(
            lambda cg: sizes_in_classes([b], max_numel // cg).map(lambda hw: (cg, hw)))

    return problems(max_numel, st.sampled_from(classes).flatmap(lambda ab: group_sizes(*ab)))


def reference_forward(x, weight, bias, groups: int, eps: float, activation: str):
    """(y, mean, rstd) in float64: the ground truth for both directions."""
    n, c = x.shape[:2]
    x64 = x.double().reshape(n, groups, -1)
    mean = x64.mean(-1)
    rstd = ((x64 - mean[..., None]).square().mean(-1) + eps).rsqrt()
    xhat = ((x64 - mean[..., None]) * rstd[..., None]).reshape(x.shape)
    per_channel = (1, c) + (1,) * (x.dim() - 2)
    z = xhat
    if weight is not None:
        z = z * weight.double().view(per_channel)
    if bias is not None:
        z = z + bias.double().view(per_channel)
    return apply_activation(z, activation), mean, rstd


LAYOUTS = ("contiguous", "channels_last", "sliced", "permuted")
"""channels_last: channels innermost (any rank >= 3); sliced: every other element of the last dim;
permuted: the last two spatial dims swapped in memory (no single spatial stride: read through a copy)."""
VALUES = ("random", "offset", "constant")
"""offset: OFFSET plus normal values with a spread of 1, or of a few ulps at OFFSET where the dtype cannot
resolve 1 there (the magnitude is not applied: the point is the offset); a one-pass variance fails here.
constant: every other group holds one value (zero variance)."""
OFFSET = 1e4
AFFINES = ("both", "weight", "bias", "none")
EPS = (1e-5, 1e-6, 1e-2)
SCALES = (1.0, 30.0)
"""Weight and bias scale: 30 drives the activations far into their tails."""


MOST_CHANNELS_PER_GROUP = 64


def problems(max_numel: int, group_sizes: st.SearchStrategy[tuple[int, int]] | None = None) -> st.SearchStrategy[dict]:
    """(N, C, *spatial) with 0 to 3 spatial dims, groups of one channel and one group of all channels,
    spatial sizes of 1, primes and odd, every layout, value pattern, affine form, eps and activation.
    `group_sizes` (channels per group, spatial size) where given: the spatial size is then split into dims."""

    @st.composite
    def draw(d: st.DrawFn) -> dict:
        most_groups = max(1, min(32, max_numel))
        if group_sizes is not None:
            cg, hw = d(group_sizes)
            most_groups = max(1, min(most_groups, max_numel // (cg * hw)))
        groups = d(st.one_of(st.just(1), edge_sizes(min(16, most_groups)), st.integers(1, most_groups)))
        if group_sizes is None:
            cg = d(st.one_of(st.just(1), sizes(max(1, min(MOST_CHANNELS_PER_GROUP, max_numel // groups)))))
        n = d(st.integers(1, max(1, min(3, max_numel // (groups * cg * (1 if group_sizes is None else hw))))))
        if group_sizes is None:
            budget = max(1, max_numel // (n * groups * cg))
            spatial = []
            for _ in range(d(st.sampled_from([0, 1, 2, 2, 3]))):
                size = d(sizes(budget))
                spatial.append(size)
                budget = max(1, budget // size)
        else:
            spatial = d(factorizations(hw, d(st.sampled_from([1, 2, 2, 3] if hw > 1 else [0, 1, 2]))))
        return {
            "shape": [n, groups * cg, *spatial],
            "groups": groups,
            "layout": d(st.sampled_from(LAYOUTS)),
            "activation": d(st.sampled_from(tuple(ACTIVATIONS))),
            "affine": d(st.sampled_from(AFFINES)),
            "values": d(st.sampled_from(VALUES)),
            "magnitude": d(magnitudes()),
            "scale": d(st.sampled_from(SCALES)),
            "eps": d(st.sampled_from(EPS)),
        }

    return draw()


def with_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """x (on its final device) in the named memory layout, same values."""
    if layout == "channels_last" and x.dim() >= 3:
        return x.movedim(1, -1).contiguous().movedim(-1, 1)
    if layout == "sliced":
        wide = torch.empty((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype, device=x.device)
        return wide[..., ::2].copy_(x)
    if layout == "permuted" and x.dim() >= 4:
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    return x.contiguous()


def make_forward_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> dict:
    """x, weight, bias and options of a problem; values drawn on the CPU so every device sees the same."""
    gen = torch.Generator().manual_seed(seed)
    shape, groups = list(problem["shape"]), problem["groups"]
    x = torch.randn(shape, generator=gen)
    values = problem.get("values", "random")
    if values == "offset":
        x = OFFSET + x * max(1.0, 4 * OFFSET * torch.finfo(dtype).eps)
    else:
        x *= problem.get("magnitude", 1.0)
    if values == "constant" and x.numel():
        by_group = x.view(shape[0], groups, -1)
        by_group[:, ::2] = by_group[:, ::2, :1].clone()
    affine = problem.get("affine", "both")
    scale = problem.get("scale", 1.0)
    weight = torch.randn(shape[1], generator=gen) * scale if affine in ("both", "weight") else None
    bias = torch.randn(shape[1], generator=gen) * scale if affine in ("both", "bias") else None
    on_device = lambda t: None if t is None else t.to(device=device, dtype=dtype)  # noqa: E731
    return {
        "x": with_layout(on_device(x), problem.get("layout", "contiguous")),
        "weight": on_device(weight),
        "bias": on_device(bias),
        "groups": groups,
        "eps": problem.get("eps", 1e-5),
        "activation": problem.get("activation", "none"),
    }


def lookup_config(table, x: torch.Tensor, groups: int, activation: str) -> dict:
    """The config `table` (a runtime.TunedConfigs) holds for a call on x, found by the call's bucket."""
    def problem() -> dict:
        # Only on a call shape not seen before: the memo key holds the strides that decide the layout.
        xs = flat_strides(x)
        inner = xs is not None and channels_inner(xs, x.shape[1], spatial_size(x))
        layout = "channels_last" if inner else "contiguous"
        return {"shape": list(x.shape), "groups": groups, "layout": layout, "activation": activation}

    return table.lookup(x.dtype, (x.shape, x.stride(), groups), lambda: bucket(problem()), problem)


def cost(problem: dict, dtype: torch.dtype, *, streams: int, param_passes: int, flops_per_element: int) -> Cost:
    """Work of one call: `streams` tensors of x's size moved, weight and bias moved `param_passes` times
    each, and the float64 mean and float32 rstd of every group."""
    numel = math.prod(problem["shape"])
    affine = problem.get("affine", "both")
    params = {"both": 2, "weight": 1, "bias": 1}.get(affine, 0) * problem["shape"][1]
    statistics = (8 + 4) * problem["shape"][0] * problem["groups"]
    return Cost(flops=flops_per_element * numel,
                bytes=(streams * numel + param_passes * params) * dtype.itemsize + statistics)


def parse_shape(text: str) -> dict:
    """'8x512x64x64' (N x C x spatial...), optionally followed by ',groups=32', ',activation=silu',
    ',layout=channels_last'; groups default to 32 or the largest count below it that divides C."""
    sizes_text, *options = text.split(",")
    shape = parse_sizes(sizes_text)
    if len(shape) < 2:
        raise ValueError(f"shape {text!r}: expected N x C x spatial sizes, like 8x512x64x64")
    fields = {"groups": None, "activation": "none", "layout": "contiguous"}
    for option in options:
        key, _, value = option.partition("=")
        if key.strip() not in fields:
            raise ValueError(f"shape {text!r}: unknown option {key.strip()!r}; expected one of {list(fields)}")
        fields[key.strip()] = value.strip()
    groups = int(fields["groups"]) if fields["groups"] else max(g for g in range(1, 33) if shape[1] % g == 0)
    if groups < 1 or shape[1] % groups:
        raise ValueError(f"shape {text!r}: {shape[1]} channels are not divisible into {groups} groups")
    if fields["activation"] not in ACTIVATIONS:
        raise ValueError(f"shape {text!r}: activation must be one of {list(ACTIVATIONS)}")
    if fields["layout"] not in LAYOUTS:
        raise ValueError(f"shape {text!r}: layout must be one of {list(LAYOUTS)}")
    return {"shape": shape, "groups": groups, "layout": fields["layout"], "activation": fields["activation"],
            "affine": "both", "values": "random", "magnitude": 1.0, "scale": 1.0, "eps": 1e-5}


PRESETS = [parse_shape(text) for text in (
    "8x512x64x64,groups=32,activation=silu",  # the goal shapes: SD U-Net blocks, contiguous
    "16x320x64x64,groups=32,activation=silu",
    "8x512x64x64,groups=32,activation=silu,layout=channels_last",
)]
"""GPU searches of both directions (GPU time is scarce: three)."""
INTERPRETER_PRESETS = [parse_shape("2x8x5x5,groups=4,activation=silu")]


def bucket_edges(problem: dict) -> list[dict]:
    """Problems a config tuned for problem's bucket must get right: the fewest and most channels and
    positions the bucket holds (never a power of two past 2), as 3-D and 4-D inputs, in the bucket's
    layout, with constant groups, a large offset, each activation and partial affine forms."""
    _, cg, hw = group_shape(problem)
    cl = problem.get("layout") == "channels_last" and hw > 1 and problem["shape"][1] > 1
    full_c, full_hw = next_pow2(cg), next_pow2(hw)
    edges = []
    cases = [("constant", "mish", "both", 1e-5), ("offset", "silu", "weight", 1e-6),
             ("random", "none", "bias", 1e-2), ("random", "mish", "both", 1e-5)]
    shapes = [(max(1, full_c // 2 + 1) if full_c > 1 else 1, max(1, full_hw // 2 + 1) if full_hw > 1 else 1),
              (max(1, full_c - 1) if full_c > 2 else full_c, max(1, full_hw - 1) if full_hw > 2 else full_hw)]
    for i, (c_here, hw_here) in enumerate(shapes):
        for j, (values, activation, affine, eps) in enumerate(cases):
            # Two groups where one would leave a single channel, which no layout can put innermost.
            groups = 2 if (i + j) % 2 or (cl and c_here == 1) else 1
            spatial = [hw_here] if j % 2 else _as_2d(hw_here)
            layout = "channels_last" if cl else ("sliced" if j == 3 else "contiguous")
            edges.append({"shape": [1 + (j == 0), groups * c_here, *spatial], "groups": groups, "layout": layout,
                          "activation": activation, "affine": affine, "values": values, "magnitude": 1.0,
                          "scale": 30.0 if j == 3 else 1.0, "eps": eps})
    return edges


def _as_2d(hw: int) -> list[int]:
    """hw positions as an H x W grid when it factors near a square, else a 1 x hw row."""
    h = max(f for f in range(1, math.isqrt(hw) + 1) if hw % f == 0)
    return [h, hw // h]
