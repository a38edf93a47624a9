"""gated_mlp's backward elementwise step as a kernel of its own: dg = dh * u * act'(g) and du = dh * act(g) from the
down projection's gradient dh (m, h) and the forward's saved [g | u] (m, 2h), into one (m, 2h) [dg | du], each
rounded once from float32 (gated.py's `_gated_backward_kernel`, one program per row and BLOCK columns). What
gated_mlp's autograd launches, with the config tuned for the call's bucket; its baseline is the step as torch's
autograd runs it for act(g) * u: du = dh * act(g) (the activation's output saved by its forward), dh * u, and the
activation's backward of that.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from autotune import runtime
from autotune.gate.strategies import sizes_in_classes, steered_classes
from autotune.kernels.common import launch as launch_
from autotune.kernels.common.grid import cdiv
from autotune.kernels.gemm import gemm as _gemm
from autotune.kernels.gemm.gated import _gated_backward_kernel, activation_slope
from autotune.kernels.gemm.matmul import apply_activation
from autotune.kernels.gemm.problems import _activation, _edge_sizes, _options, _size, place
from autotune.search_spaces.gated_mlp_backward import SPACE, bucket
from autotune.spec import Cost, Inputs, KernelSpec

ACTIVATIONS = tuple(_gemm.ACTIVATIONS)
DEFAULT_ACTIVATION = "silu"
LAYOUTS = ("contiguous", "transposed", "sliced")
"""dh's layouts (the kernel reads it through its strides); [g | u] is the forward's contiguous (m, 2h)."""
GATE_SCALES = {"normal": 1.0, "small": 1e-4, "large": 1e3}
"""Scales of the gate's pre-activations g: ordinary, near 0, and deep in the activations' tails (dh and u keep a
scale of 1, so du = dh * act(g) stays in float16's range)."""


def _launch(dh: torch.Tensor, gu: torch.Tensor, dgu: torch.Tensor, activation: str, config: dict,
            table=None) -> None:
    """[dg | du] into the contiguous (m, 2h) dgu from dh (m, h) (any strides) and the contiguous [g | u]. table: a
    public call's runtime table, whose kept launch binds once (`launch.kept`)."""
    m, h = dh.shape
    if m * h == 0:
        return
    block = config["BLOCK"]
    launch_.kept(table, _gated_backward_kernel, (m, cdiv(h, block)))(
        dh, gu, dgu, h, *dh.stride(), ACTIVATION=_gemm.ACTIVATIONS[activation], BLOCK=block,
        num_warps=config["num_warps"],
    )


def gates_backward(dh: torch.Tensor, gu: torch.Tensor, activation: str) -> torch.Tensor:
    """[dg | du], a new contiguous (m, 2h), from dh (m, h) and the forward's contiguous [g | u], with the config
    tuned for the call's bucket."""
    m, h = dh.shape
    dgu = torch.empty((m, 2 * h), dtype=dh.dtype, device=dh.device)
    if m * h:
        config = _TUNED.lookup(dh.dtype, (m, h), lambda: bucket({"m": m, "h": h}),
                               lambda: {"m": m, "h": h, "activation": activation})
        runtime.note_launch(SPEC.name, config)
        _launch(dh, gu, dgu, activation, config, table=_TUNED)
    return dgu


def launch(inputs: Inputs, config: dict, out: torch.Tensor) -> torch.Tensor:
    _launch(inputs["dh"], inputs["gu"], out, inputs["activation"], config)
    return out


def reference(inputs: Inputs) -> torch.Tensor:
    """[dg | du] of act(g) * u by float64 autograd."""
    h = inputs["dh"].shape[1]
    gu = inputs["gu"].double()
    g, u = gu[:, :h].clone().requires_grad_(), gu[:, h:].clone().requires_grad_()
    with torch.enable_grad():
        dg, du = torch.autograd.grad(apply_activation(g, inputs["activation"]) * u, (g, u), inputs["dh"].double())
    return torch.cat([dg, du], 1)


def _slope_terms(z: torch.Tensor, activation: str) -> torch.Tensor:
    """The size of the terms act'(z) is a sum of (float64): near a root of act' (silu's at z = -1.28, gelu's
    at -0.75) they cancel, and float32 rounding of the terms is all that is left of the sum."""
    if activation == "silu":
        s = torch.sigmoid(z)
        return s + (z * s * (1 - s)).abs()
    if activation == "gelu":
        return torch.special.ndtr(z) + z.abs() * torch.exp(-0.5 * z * z) * 0.3989422804014327
    if activation == "gelu_tanh":
        s = torch.sigmoid(1.5957691216057308 * (z + 0.044715 * z**3))
        return s + 1.5957691216057308 * z.abs() * s * (1 - s) * (1 + 0.134145 * z * z)
    return torch.ones_like(z)


def error_floor(inputs: Inputs) -> torch.Tensor:
    """Per element of [dg | du]: for dg, |dh * u| times the size of act'(g)'s terms (a sum that cancels near a root
    of act'); du = dh * act(g) is one product, judged relative to itself (a floor of 0)."""
    h = inputs["dh"].shape[1]
    gu, dh = inputs["gu"].double(), inputs["dh"].double()
    dg = (dh * gu[:, h:]).abs() * _slope_terms(gu[:, :h], inputs["activation"])
    return torch.cat([dg, torch.zeros_like(dg)], 1)


def baseline(inputs: Inputs) -> torch.Tensor:
    """What torch's autograd runs for act(g) * u in the working dtype: du = dh * act(g), from the activation's output
    its forward saved, and the activation's backward of dh * u; each written into its half of one (m, 2h) tensor
    (out= variants), as the kernel writes, so neither side pays for a copy."""
    dh, gu, activation = inputs["dh"], inputs["gu"], inputs["activation"]
    h = dh.shape[1]
    g, u = gu[:, :h], gu[:, h:]
    dgu = torch.empty_like(gu)
    dg, du = dgu[:, :h], dgu[:, h:]
    torch.mul(dh, inputs["act_g"], out=du)
    d_act = dh * u
    if activation == "relu":
        torch.ops.aten.threshold_backward.grad_input(d_act, inputs["act_g"], 0, grad_input=dg)
    elif activation in ("gelu", "gelu_tanh"):
        approximate = "tanh" if activation == "gelu_tanh" else "none"
        torch.ops.aten.gelu_backward.grad_input(d_act, g, approximate=approximate, grad_input=dg)
    elif activation == "silu":
        torch.ops.aten.silu_backward.grad_input(d_act, g, grad_input=dg)
    else:
        dg.copy_(d_act)  # a bilinear layer: torch's dg is dh * u itself
    return dgu


def _rows_and_length(max_numel: int, h: st.SearchStrategy[int] | None = None) -> st.SearchStrategy[tuple[int, int]]:
    """(m, h) with m * 2h within max_numel: [g | u] is the largest tensor."""
    most = max(1, max_numel // 2)
    lengths = _size(max(1, most)) if h is None else h
    return lengths.flatmap(lambda n: _size(max(1, most // n)).map(lambda m: (m, n)))


def problems(max_numel: int, lengths: st.SearchStrategy[int] | None = None) -> st.SearchStrategy[dict]:
    return _rows_and_length(max_numel, lengths).flatmap(
        lambda mh: st.fixed_dictionaries({
            "m": st.just(mh[0]), "h": st.just(mh[1]), "activation": st.sampled_from(ACTIVATIONS),
            "layout": st.sampled_from(LAYOUTS), "values": st.sampled_from(tuple(GATE_SCALES)),
        })
    )


def problems_for_config(config: dict, dtype: torch.dtype, max_numel: int) -> st.SearchStrategy[dict]:
    """`problems` with row lengths in the power-of-two classes the config runs on (the constraints read h only
    through its class)."""
    most = max(1, max_numel // 2)
    classes = steered_classes(lambda n: SPACE.rejects(config, {"m": 1, "h": n}) is None, most)
    if classes is None:
        return problems(max_numel)
    return problems(max_numel, sizes_in_classes(classes, most))


def make_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    """dh in the problem's layout, the forward's [g | u] (g at the problem's scale) and act(g) rounded to dtype,
    which torch's autograd saves and its baseline reads."""
    gen = torch.Generator().manual_seed(seed)
    m, h, activation = problem["m"], problem["h"], problem.get("activation", DEFAULT_ACTIVATION)
    gu = torch.randn(m, 2 * h, generator=gen)
    gu[:, :h] *= GATE_SCALES[problem.get("values", "normal")]
    gu = gu.to(device=device, dtype=dtype)
    dh = place(torch.randn(m, h, generator=gen), problem.get("layout", "contiguous"), dtype, device)
    act_g = apply_activation(gu[:, :h].float(), activation).to(dtype)
    return {"dh": dh, "gu": gu, "act_g": act_g, "activation": activation}


def parse_shape(text: str) -> dict:
    """'MxH' (dh (M, H), [g | u] (M, 2H)), silu unless another activation is given: '8192x14336,gelu_tanh'."""
    dims, options = _options(text, ACTIVATIONS)
    if len(dims) != 2:
        raise ValueError(f"shape {text!r}: expected MxH like 8192x14336")
    return {"m": dims[0], "h": dims[1], "activation": _activation(options, DEFAULT_ACTIVATION), "layout": "contiguous",
            "values": "normal"}


def bucket_edges(problem: dict) -> list[dict]:
    """The bucket's smallest sizes (never a block multiple) with dh transposed and large gate values, its largest
    with dh sliced and small ones, each with another activation too."""
    (m_lo, m_hi), (h_lo, h_hi) = _edge_sizes(problem["m"]), _edge_sizes(problem["h"])
    others = [a for a in ("gelu_tanh", "relu") if a != problem.get("activation")]
    return [
        {**problem, "m": m_lo, "h": h_lo, "layout": "transposed", "values": "large"},
        {**problem, "m": m_hi, "h": h_hi, "layout": "sliced", "values": "small", "activation": others[0]},
        {**problem, "m": m_lo, "h": h_hi, "activation": others[1] if len(others) > 1 else "gelu"},
    ]


def cost(problem: dict, dtype: torch.dtype) -> Cost:
    """Reads dh, g and u, writes dg and du."""
    elements = problem["m"] * problem["h"]
    return Cost(flops=10 * elements, bytes=5 * elements * dtype.itemsize)


SPEC = KernelSpec(
    name="gated_mlp_backward",
    space=SPACE,
    launch=launch,
    reference=reference,
    baseline=baseline,
    problems=problems,
    problems_for_config=problems_for_config,
    make_inputs=make_inputs,
    bucket=bucket,
    cost=cost,
    # Llama 3 8B's MLP at 8192 and 4096 tokens, and TinyLlama's (intermediate 5632), as gated_mlp's presets.
    presets=[parse_shape(s) for s in ("8192x14336", "4096x14336", "8192x5632")],
    interpreter_presets=[parse_shape("33x72")],
    parse_shape=parse_shape,
    sources=(_gemm.activate, activation_slope, _gated_backward_kernel),
    description="gated_mlp backward step: dg = dh * u * act'(g), du = dh * act(g) from the saved [g | u]",
    bucket_edges=bucket_edges,
    public=lambda inputs: gates_backward(inputs["dh"], inputs["gu"], inputs["activation"]),
    error_floor=error_floor,
)

_TUNED = runtime.tuned(SPEC)
