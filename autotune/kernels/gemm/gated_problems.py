"""Problems for gated_mlp: the Hypothesis strategies, the inputs a problem names, the edge cases of a bucket, the
CLI shape syntax and the work a call does, built from the GEMM family's pieces (problems.py).

A problem has `m` rows of x (its leading dims are `lead`, empty for a 2-D x), `k` features, `h` outputs of the gate
and up projections, `n` outputs of the down projection; `x_layout`, `w_layout` (of all three weights); `bias` (all
three biases or none); `activation`; `values`, the scale of the operands.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from autotune.identity import config_key
from autotune.kernels.gemm.gemm import ACTIVATIONS
from autotune.kernels.gemm.problems import (
    GROWTH,
    LAYOUTS,
    STEERED_GROWTH,
    VALUES,
    _activation,
    _dims,
    _dims_in_classes,
    _edge_sizes,
    _lead,
    _linear_size,
    _options,
    _scales,
    _size,
    _weight,
    _x,
    class_finder,
)
from autotune.search_spaces.gated_mlp import SPACE
from autotune.space import Config
from autotune.spec import Cost

DEFAULT_ACTIVATION = "silu"
"""Llama's, Mistral's and Qwen's gate (SwiGLU)."""


def gated_problems(max_numel: int, dims: st.SearchStrategy[list[int]] | None = None) -> st.SearchStrategy[dict]:
    return (_dims(max_numel, 4) if dims is None else dims).flatmap(
        lambda mkhn: st.fixed_dictionaries({
            "m": st.just(mkhn[0]), "k": st.just(mkhn[1]), "h": st.just(mkhn[2]), "n": st.just(mkhn[3]),
            "lead": _lead(mkhn[0]), "x_layout": st.sampled_from(LAYOUTS), "w_layout": st.sampled_from(LAYOUTS),
            "bias": st.booleans(), "activation": st.sampled_from(tuple(ACTIVATIONS)),
            "values": st.sampled_from(tuple(VALUES)),
        })
    )


def gated_problems_for_config(config: Config, dtype: str, max_numel: int) -> st.SearchStrategy[dict]:
    """`gated_problems(max_numel)` for a config whose constraints admit few of its draws: (m, k, h) drawn in the
    power-of-two classes the config runs on in dtype, larger on a GPU (as matmul's `problems_for_config`)."""
    from autotune import gpu

    growth = 1 if gpu.interpreter_active() else STEERED_GROWTH
    most, macs = growth * max_numel, growth * growth * GROWTH * max_numel
    classes = _classes(config_key(config), dtype, most, macs)
    if not classes or set(_classes(None, dtype, max_numel, GROWTH * max_numel)) <= set(classes):
        return gated_problems(max_numel)

    def with_n(mkh: list[int]) -> st.SearchStrategy[list[int]]:
        # n bounds both the down projection's weight (n, h) and the output (m, n): their float64 references and the
        # gate's comparison take several copies of each, so an unbounded m * n fills a GPU's memory.
        return _size(max(1, min(max_numel // 32, most // max(mkh[0], mkh[2])))).map(lambda n: [*mkh, n])

    dims = st.sampled_from(classes).flatmap(lambda c: _dims_in_classes(c, most, macs)).flatmap(with_n)
    return gated_problems(max_numel, dims=dims)


_classes = class_finder(SPACE, lambda mkh, dtype: {"m": mkh[0], "k": mkh[1], "h": mkh[2], "n": 1, "dtype": dtype})
"""The (m, k, h) classes for a config."""


def gated_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> dict:
    """x and weights whose gate pre-activations have the scale `values` names (1, 1e-4 or 1e3: activations deep
    in their tails) and whose up projections have a scale of 1, so act(g) * u stays in float16's range; biases of
    those scales; the down projection keeps the output at the gate's scale."""
    gen = torch.Generator().manual_seed(seed)
    k, h, n = problem["k"], problem["h"], problem["n"]
    left, right, bias = _scales(problem, k)
    x = _x(problem, left, gen, dtype, device)
    w_gate = _weight(h, k, right, problem, gen, dtype, device)
    w_up = _weight(h, k, 1 / (left * math.sqrt(max(k, 1))), problem, gen, dtype, device)
    w_down = _weight(n, h, 1 / math.sqrt(max(h, 1)), problem, gen, dtype, device)

    def vector(size: int, scale: float):
        return (torch.randn(size, generator=gen) * scale).to(device=device, dtype=dtype) if problem.get("bias") else None

    return {"x": x, "w_gate": w_gate, "b_gate": vector(h, bias), "w_up": w_up, "b_up": vector(h, 1.0),
            "w_down": w_down, "b_down": vector(n, bias), "activation": problem.get("activation", DEFAULT_ACTIVATION)}


def parse_gated(text: str) -> dict:
    """'MxKxHxN' (x (M, K) -> H gated features -> N), or 'MxKxH' (N = K, as in a transformer block), with silu and
    no biases; ',bias' adds them, ',gelu_tanh' (or another activation) changes the gate's."""
    dims, options = _options(text, ("bias", *ACTIVATIONS))
    if len(dims) not in (3, 4):
        raise ValueError(f"shape {text!r}: expected MxKxHxN or MxKxH like 8192x4096x14336x4096")
    m, k, h, n = dims if len(dims) == 4 else (*dims, dims[1])
    return {"m": m, "k": k, "h": h, "n": n, "lead": [], "x_layout": "contiguous", "w_layout": "contiguous",
            "bias": "bias" in options, "activation": _activation(options, DEFAULT_ACTIVATION), "values": "normal"}


def gated_edges(problem: dict) -> list[dict]:
    """The bucket's smallest sizes with large values and transposed operands, its largest with small values, x
    sliced and the biases flipped."""
    lo_hi = {d: _edge_sizes(problem[d]) for d in ("m", "k", "h", "n")}
    base = {**problem, "lead": []}
    return [
        {**base, **{d: lo for d, (lo, _) in lo_hi.items()}, "x_layout": "transposed", "w_layout": "transposed",
         "values": "large"},
        {**base, **{d: hi for d, (_, hi) in lo_hi.items()}, "x_layout": "sliced", "bias": not problem.get("bias"),
         "values": "small"},
    ]


def gated_floor(inputs: dict) -> torch.Tensor:
    """Error floor of the gated MLP: the down projection's sum over hidden values of the size of the gate's typical
    sum times the up projection's (the activations never grow a value)."""
    x = inputs["x"]
    hidden = _linear_size(x, inputs["w_gate"], inputs["b_gate"]) * _linear_size(x, inputs["w_up"], inputs["b_up"])
    return _linear_size(hidden, inputs["w_down"], inputs["b_down"])


def gated_cost(problem: dict, dtype: torch.dtype) -> Cost:
    """The three products; the bytes of x, the weights, the biases and the output: the gated features need not
    leave the chip."""
    m, k, h, n = problem["m"], problem["k"], problem["h"], problem["n"]
    elements = m * k + 2 * h * k + n * h + m * n + ((2 * h + n) if problem.get("bias") else 0)
    return Cost(flops=2 * m * h * (2 * k + n), bytes=elements * dtype.itemsize)
