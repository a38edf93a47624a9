"""Problems for matmul, linear and mlp: the Hypothesis strategies, the inputs a problem names, the edge cases
of a bucket, the CLI shape syntax (sizes in the order data flows through them) and the work a call does.

matmul: `m`, `k`, `n`; `batch` (0: 2-D operands; else 3-D ones, with `broadcast` "a" or "b" making that
operand one 2-D matrix for the whole batch); `a_layout`, `b_layout`. linear: `m` rows of x (its leading
dims are `lead`, empty for a 2-D x), `k`, `n`; `x_layout`, `w_layout` (of the (n, k) weight); `bias`;
`activation`. mlp: `m`, `k`, `h` (hidden), `n`; the layouts, `bias` (both biases or neither) and
`activation`. All: `values`, the scale of the operands.
"""

from __future__ import annotations

import functools
import itertools
import json
import math

import torch
from hypothesis import strategies as st

from autotune.gate.strategies import class_floor, sizes, sizes_in_classes
from autotune.identity import config_key
from autotune.kernels.gemm.gemm import ACTIVATIONS
from autotune.search_spaces.matmul import SPACE
from autotune.space import Config, next_pow2
from autotune.spec import Cost, parse_sizes

EDGE_SIZES = (1, 7, 33, 65, 129, 4097)
"""Sizes that break tiling: 1, primes, one past a power of two (a block holding all but one element)."""
LAYOUTS = ("contiguous", "transposed", "sliced")
"""How an operand sits in memory: row-major; column-major (the transpose of a contiguous matrix, as an
nn.Linear weight is to the b of x @ weight.T); every other column of a wider matrix (no unit stride)."""
VALUES = {"normal": (1.0, 1.0, 1.0), "small": (1e-2, 1e-2, 1e-4), "large": (1e4, 0.1, 1e3)}
"""Scales of (the left operand, the right one times sqrt(k), the bias): outputs of about 1, 1e-4 (half
types keep their precision there) and 1e3 (inputs near the top of float16's range, outputs well inside it,
activations deep in their tails)."""
GROWTH = 8
"""Multiply-adds per element of max_numel a drawn problem may take: the interpreter's time goes with it."""


def _size(limit: int) -> st.SearchStrategy[int]:
    edges = [s for s in EDGE_SIZES if s <= limit] or [1]
    return st.one_of(st.sampled_from(edges), sizes(max(1, limit)))


@st.composite
def _dims(draw: st.DrawFn, max_numel: int, count: int) -> list[int]:
    """`count` sizes, the first and last (the output's rows and columns) at most max_numel / 32 each, any
    two at most max_numel together, all at most GROWTH * max_numel."""
    out: list[int] = []
    for i in range(count):
        limit = max_numel // 32 if i in (0, count - 1) else max_numel
        limit = min(limit, max_numel // max(out[-1:] or [1]), GROWTH * max_numel // math.prod(out or [1]))
        out.append(draw(_size(max(1, limit))))
    return out


STEERED_GROWTH = 16
"""On a GPU, how much larger than a plain draw a problem drawn for one config may be: 16 times the operand
and output elements, 256 times the multiply-adds (at most 2G: milliseconds in float64 on a GPU). A persistent
128 x 256 tile only runs where the output has more tiles than the GPU has SMs (over 4M elements on an H100,
with K deep enough for its stages), and plain draws stay under 1M. The interpreter keeps the plain limits."""


def problems_for_config(config: Config, dtype: str, max_numel: int, problems) -> st.SearchStrategy[dict]:
    """`problems(max_numel)` for a config whose constraints admit few of its draws: (m, k, n) drawn in the
    power-of-two classes the config runs on in dtype (the space's constraints depend on the sizes only
    through them), up to STEERED_GROWTH times larger on a GPU; the other fields as `problems` draws them."""
    from autotune import gpu

    growth = 1 if gpu.interpreter_active() else STEERED_GROWTH
    most, macs = growth * max_numel, growth * growth * GROWTH * max_numel
    classes = _classes(config_key(config), dtype, most, macs)
    if not classes or set(_classes(None, dtype, max_numel, GROWTH * max_numel)) <= set(classes):
        return problems(max_numel)
    return problems(max_numel, dims=st.sampled_from(classes).flatmap(lambda c: _dims_in_classes(c, most, macs)))


def class_finder(space, probe):
    """A cached `classes(config_json, dtype, most, macs)`: the (three-size) classes of exponents whose smallest sizes
    stay within the limits (each pair's product within `most`, all three's within `macs`) and, for a config (None:
    any), whose largest `space` lets it run on; `probe(sizes, dtype)` is the problem of a class's largest sizes."""

    @functools.lru_cache(maxsize=1024)  # a search checks each config more than once
    def classes(config_json: str | None, dtype: str, most: int, macs: int) -> tuple[tuple[int, int, int], ...]:
        config = None if config_json is None else json.loads(config_json)
        exponents = range(next_pow2(most).bit_length())
        found = []
        for es in itertools.product(exponents, exponents, exponents):
            a, b, c = (class_floor(e) for e in es)
            if a * b > most or b * c > most or a * c > most or a * b * c > macs:
                continue
            if config is None or space.rejects(config, probe([2**e for e in es], dtype)) is None:
                found.append(es)
        return tuple(found)

    return classes


_classes = class_finder(SPACE, lambda mkn, dtype: {"m": mkn[0], "k": mkn[1], "n": mkn[2], "batch": 0, "dtype": dtype})
"""The (m, k, n) classes for a config."""


def _dims_in_classes(classes: tuple[int, int, int], most: int, macs: int) -> st.SearchStrategy[list[int]]:
    em, ek, en = classes

    @st.composite
    def draw(d: st.DrawFn) -> list[int]:
        low = [class_floor(e) for e in classes]
        m = d(sizes_in_classes([em], min(most // low[1], most // low[2], macs // (low[1] * low[2]))))
        k = d(sizes_in_classes([ek], min(most // m, most // low[2], macs // (m * low[2]))))
        n = d(sizes_in_classes([en], min(most // k, most // m, macs // (m * k))))
        return [m, k, n]

    return draw()


def matmul_problems(max_numel: int, dims: st.SearchStrategy[list[int]] | None = None) -> st.SearchStrategy[dict]:
    return st.tuples(_dims(max_numel, 3) if dims is None else dims, st.sampled_from([0, 0, 1, 2, 3])).flatmap(
        lambda dims_batch: st.fixed_dictionaries({
            "m": st.just(dims_batch[0][0]), "k": st.just(dims_batch[0][1]), "n": st.just(dims_batch[0][2]),
            "batch": st.just(dims_batch[1]),
            "broadcast": st.sampled_from(["none", "a", "b"]) if dims_batch[1] else st.just("none"),
            "a_layout": st.sampled_from(LAYOUTS), "b_layout": st.sampled_from(LAYOUTS),
            "values": st.sampled_from(tuple(VALUES)),
        })
    )


def _lead(m: int) -> st.SearchStrategy[list[int]]:
    """Leading dims of x with m rows: none (2-D x), or two whose product is m."""
    splits = [[d, m // d] for d in range(2, min(m, 8) + 1) if m % d == 0]
    return st.one_of(st.just([]), st.sampled_from(splits)) if splits else st.just([])


def linear_problems(max_numel: int, dims: st.SearchStrategy[list[int]] | None = None) -> st.SearchStrategy[dict]:
    return (_dims(max_numel, 3) if dims is None else dims).flatmap(
        lambda mkn: st.fixed_dictionaries({
            "m": st.just(mkn[0]), "k": st.just(mkn[1]), "n": st.just(mkn[2]), "lead": _lead(mkn[0]),
            "x_layout": st.sampled_from(LAYOUTS), "w_layout": st.sampled_from(LAYOUTS),
            "bias": st.booleans(), "activation": st.sampled_from(tuple(ACTIVATIONS)),
            "values": st.sampled_from(tuple(VALUES)),
        })
    )


def mlp_problems(max_numel: int) -> st.SearchStrategy[dict]:
    return _dims(max_numel, 4).flatmap(
        lambda mkhn: st.fixed_dictionaries({
            "m": st.just(mkhn[0]), "k": st.just(mkhn[1]), "h": st.just(mkhn[2]), "n": st.just(mkhn[3]),
            "lead": _lead(mkhn[0]), "x_layout": st.sampled_from(LAYOUTS), "w_layout": st.sampled_from(LAYOUTS),
            "bias": st.booleans(), "activation": st.sampled_from(tuple(ACTIVATIONS)),
            "values": st.sampled_from(tuple(VALUES)),
        })
    )


def place(values: torch.Tensor, layout: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """values (a matrix or a batch of them) in dtype on device, laid out as named. The layout is made on the
    device, last: a move would make a strided view contiguous."""
    if layout == "transposed":
        return values.transpose(-1, -2).to(device=device, dtype=dtype).contiguous().transpose(-1, -2)
    if layout == "sliced":
        wide = torch.zeros(*values.shape[:-1], 2 * values.shape[-1], dtype=dtype, device=device)
        return wide[..., ::2].copy_(values)
    return values.to(device=device, dtype=dtype).contiguous()


def _scales(problem: dict, k: int) -> tuple[float, float, float]:
    left, right, bias = VALUES[problem.get("values", "normal")]
    return left, right / math.sqrt(max(k, 1)), bias


def matmul_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    m, k, n, batch = problem["m"], problem["k"], problem["n"], problem.get("batch", 0)
    broadcast = problem.get("broadcast", "none")
    left, right, _ = _scales(problem, k)
    a_batch = [batch] if batch and broadcast != "a" else []
    b_batch = [batch] if batch and broadcast != "b" else []
    a = torch.randn(a_batch + [m, k], generator=gen) * left
    b = torch.randn(b_batch + [k, n], generator=gen) * right
    return {"a": place(a, problem.get("a_layout", "contiguous"), dtype, device),
            "b": place(b, problem.get("b_layout", "contiguous"), dtype, device)}


def _x(problem: dict, scale: float, gen: torch.Generator, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """linear's and mlp's x: (m, k), or (*lead, k); transposed means the last two dims are."""
    lead = list(problem.get("lead") or [problem["m"]])
    return place(torch.randn(lead + [problem["k"]], generator=gen) * scale, problem.get("x_layout", "contiguous"),
                 dtype, device)


def _weight(rows: int, cols: int, scale: float, problem: dict, gen: torch.Generator, dtype, device) -> torch.Tensor:
    return place(torch.randn(rows, cols, generator=gen) * scale, problem.get("w_layout", "contiguous"), dtype, device)


def linear_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    left, right, bias = _scales(problem, problem["k"])
    x = _x(problem, left, gen, dtype, device)
    weight = _weight(problem["n"], problem["k"], right, problem, gen, dtype, device)
    b = (torch.randn(problem["n"], generator=gen) * bias).to(device=device, dtype=dtype) if problem.get("bias") else None
    return {"x": x, "weight": weight, "bias": b, "activation": problem.get("activation", "none")}


def mlp_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    left, right, bias = _scales(problem, problem["k"])
    x = _x(problem, left, gen, dtype, device)
    w1 = _weight(problem["h"], problem["k"], right, problem, gen, dtype, device)
    # The hidden activations have the scale of the first bias; the second weight keeps the output there.
    w2 = _weight(problem["n"], problem["h"], 1 / math.sqrt(max(problem["h"], 1)), problem, gen, dtype, device)

    def vector(size: int):
        return (torch.randn(size, generator=gen) * bias).to(device=device, dtype=dtype) if problem.get("bias") else None

    return {"x": x, "w1": w1, "b1": vector(problem["h"]), "w2": w2, "b2": vector(problem["n"]),
            "activation": problem.get("activation", "gelu_tanh")}


def _options(text: str, allowed: tuple[str, ...]) -> tuple[list[int], set[str]]:
    body, *opts = [part.strip() for part in text.split(",")]
    options = {o.lower() for o in opts if o}
    unknown = options - set(allowed)
    if unknown:
        raise ValueError(f"shape {text!r}: unknown option(s) {sorted(unknown)}; expected any of {list(allowed)}")
    return parse_sizes(body), options


def parse_matmul(text: str) -> dict:
    """'MxKxN' (a (M, K) @ (K, N) product) or 'BxMxKxN' (a batch of B), contiguous operands."""
    dims, _ = _options(text, ())
    if len(dims) not in (3, 4):
        raise ValueError(f"shape {text!r}: expected MxKxN or BxMxKxN, like 4096x4096x4096")
    batch, (m, k, n) = (dims[0], dims[1:]) if len(dims) == 4 else (0, dims)
    return {"m": m, "k": k, "n": n, "batch": batch, "broadcast": "none", "a_layout": "contiguous",
            "b_layout": "contiguous", "values": "normal"}


def _activation(options: set[str], default: str) -> str:
    acts = options & set(ACTIVATIONS)
    if len(acts) > 1:
        raise ValueError(f"at most one activation, got {sorted(acts)}")
    return acts.pop() if acts else default


def parse_linear(text: str) -> dict:
    """'MxKxN' (x (M, K), weight (N, K)), then optional ',bias' and an activation: ',gelu_tanh'."""
    dims, options = _options(text, ("bias", *ACTIVATIONS))
    if len(dims) != 3:
        raise ValueError(f"shape {text!r}: expected MxKxN like 8192x4096x16384,bias,gelu_tanh")
    m, k, n = dims
    return {"m": m, "k": k, "n": n, "lead": [], "x_layout": "contiguous", "w_layout": "contiguous",
            "bias": "bias" in options, "activation": _activation(options, "none"), "values": "normal"}


def parse_mlp(text: str) -> dict:
    """'MxKxHxN' (x (M, K) -> hidden H -> N) with biases and gelu_tanh; ',nobias' and another activation
    (',relu') change them (',bias' says the default)."""
    dims, options = _options(text, ("bias", "nobias", *ACTIVATIONS))
    if {"bias", "nobias"} <= options:
        raise ValueError(f"shape {text!r}: bias or nobias, not both")
    if len(dims) != 4:
        raise ValueError(f"shape {text!r}: expected MxKxHxN like 8192x4096x16384x4096")
    m, k, h, n = dims
    return {"m": m, "k": k, "h": h, "n": n, "lead": [], "x_layout": "contiguous", "w_layout": "contiguous",
            "bias": "nobias" not in options, "activation": _activation(options, "gelu_tanh"), "values": "normal"}


def _edge_sizes(size: int) -> tuple[int, int]:
    """The smallest size of size's bucket (one past half its power of two) and the largest."""
    top = next_pow2(size)
    return max(1, top // 2 + 1), top


def matmul_edges(problem: dict) -> list[dict]:
    """Problems in problem's bucket a config tuned for it must get right: the bucket's smallest sizes (never
    a block multiple) with transposed operands and large values, its largest sizes sliced with small
    values, and its own sizes with a broadcast operand (batched) or transposed ones."""
    (m_lo, m_hi), (k_lo, k_hi), (n_lo, n_hi) = (_edge_sizes(problem[d]) for d in ("m", "k", "n"))
    batch = problem.get("batch", 0)
    b_lo, b_hi = _edge_sizes(batch) if batch else (0, 0)
    base = {**problem, "broadcast": "none"}
    return [
        {**base, "m": m_lo, "k": k_lo, "n": n_lo, "batch": b_lo, "a_layout": "transposed", "b_layout": "transposed",
         "values": "large"},
        {**base, "m": m_hi, "k": k_hi, "n": n_hi, "batch": b_hi, "a_layout": "sliced", "b_layout": "contiguous",
         "values": "small"},
        {**base, "broadcast": "b" if batch else "none", "a_layout": "contiguous", "b_layout": "transposed"},
    ]


def linear_edges(problem: dict) -> list[dict]:
    """As for matmul, with the bias and each activation, the weight in both orientations."""
    (m_lo, m_hi), (k_lo, k_hi), (n_lo, n_hi) = (_edge_sizes(problem[d]) for d in ("m", "k", "n"))
    base = {**problem, "lead": []}
    return [
        {**base, "m": m_lo, "k": k_lo, "n": n_lo, "x_layout": "transposed", "w_layout": "transposed", "bias": True,
         "activation": "gelu", "values": "large"},
        {**base, "m": m_hi, "k": k_hi, "n": n_hi, "x_layout": "sliced", "w_layout": "contiguous", "bias": False,
         "activation": "silu", "values": "small"},
        {**base, "x_layout": "contiguous", "w_layout": "contiguous", "bias": True, "activation": "relu"},
    ]


def mlp_edges(problem: dict) -> list[dict]:
    """The bucket's smallest sizes with large values and its largest with small ones, strided layouts."""
    lo_hi = {d: _edge_sizes(problem[d]) for d in ("m", "k", "h", "n")}
    base = {**problem, "lead": []}
    return [
        {**base, **{d: lo for d, (lo, _) in lo_hi.items()}, "x_layout": "transposed", "w_layout": "transposed",
         "values": "large"},
        {**base, **{d: hi for d, (_, hi) in lo_hi.items()}, "x_layout": "sliced", "bias": not problem.get("bias"),
         "values": "small"},
    ]


def _sum_size(magnitude: torch.Tensor, terms: int) -> torch.Tensor:
    """The typical size of a sum of `terms` terms of random sign whose magnitudes add up to `magnitude`."""
    return magnitude / math.sqrt(max(terms, 1))


def matmul_floor(inputs: dict) -> torch.Tensor:
    """Error floor of a @ b: |a| @ |b| over the square root of K (see verify's error_floor)."""
    a, b = inputs["a"].double().abs(), inputs["b"].double().abs()
    return _sum_size(torch.matmul(a, b), a.shape[-1])


def _linear_size(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    magnitude = torch.nn.functional.linear(x.double().abs(), weight.double().abs(), None if bias is None else bias.double().abs())
    return _sum_size(magnitude, x.shape[-1] + (bias is not None))


def linear_floor(inputs: dict) -> torch.Tensor:
    """Error floor of activation(x @ weight.T + bias): that of the sum (an activation's slope is at most
    about 1, and it only shrinks an error)."""
    return _linear_size(inputs["x"], inputs["weight"], inputs["bias"])


def mlp_floor(inputs: dict) -> torch.Tensor:
    """Error floor of the mlp: the second sum's, over hidden values of the first sum's typical size (the
    activations never grow a value)."""
    hidden = _linear_size(inputs["x"], inputs["w1"], inputs["b1"])
    return _linear_size(hidden, inputs["w2"], inputs["b2"])


def matmul_cost(problem: dict, dtype: torch.dtype) -> Cost:
    m, k, n, batch = problem["m"], problem["k"], problem["n"], max(1, problem.get("batch", 0))
    broadcast = problem.get("broadcast", "none")
    a = m * k * (1 if broadcast == "a" else batch)
    b = k * n * (1 if broadcast == "b" else batch)
    return Cost(flops=2 * batch * m * n * k, bytes=(a + b + batch * m * n) * dtype.itemsize)


def linear_cost(problem: dict, dtype: torch.dtype) -> Cost:
    m, k, n = problem["m"], problem["k"], problem["n"]
    elements = m * k + n * k + m * n + (n if problem.get("bias") else 0)
    return Cost(flops=2 * m * n * k, bytes=elements * dtype.itemsize)


def mlp_cost(problem: dict, dtype: torch.dtype) -> Cost:
    """The two products; the bytes of x, the weights, the biases and the output: the hidden activations
    need not leave the chip."""
    m, k, h, n = problem["m"], problem["k"], problem["h"], problem["n"]
    elements = m * k + h * k + n * h + m * n + ((h + n) if problem.get("bias") else 0)
    return Cost(flops=2 * m * h * (k + n), bytes=elements * dtype.itemsize)
