"""Problems for layer_norm and rms_norm, forward and backward: the Hypothesis strategy, the inputs a problem
names, the edge cases of a bucket, the CLI shape syntax and the bytes a call must move.

A problem is a dict: `shape` (the input's shape, the normalized dims last), `norm_dims` (how many trailing
dims are normalized), `weight`, `bias`, `residual` (forward: a residual is added first; backward: the
gradient of the returned sum flows in too), `eps` (None: rms_norm's default), `values` (random rows,
constant rows, or rows around a common offset of 1e4), `magnitude`, `layout` and `fp32_params`.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from autotune.gate.strategies import PROBE_ROWS, magnitudes, shapes, sizes, sizes_in_classes, steered_classes
from autotune.search_spaces.layer_norm import row_shape
from autotune.space import Config, SearchSpace, next_pow2
from autotune.spec import Cost, Inputs, parse_sizes

WIDTHS = (1, 2, 3, 5, 7, 13, 31, 127, 509, 1021, 4093, 4095, 4096, 5120, 11008, 65537, 131071)
"""Row lengths that break kernels: 1, primes, one short of a block, and the hidden sizes of real models."""
VALUES = ("random", "constant", "offset")
"""Rows of random values; constant rows (zero variance); rows around a common offset of 1e4 (a one-pass
E[x^2] - E[x]^2 variance cancels to garbage there in float32)."""
OFFSET = 1e4
LAYOUTS = ("contiguous", "padded", "strided")
"""How x (and every other row-shaped input) sits in memory: packed; rows further apart than their length;
every other element (a copy of the rows, not a view, reaches the kernel)."""
LAYER_NORM_EPS = (1e-5, 1e-6, 1e-12, 0.1)
LAYER_NORM_BACKWARD_EPS = (1e-5, 1e-6, 1e-3, 0.1)
"""No 1e-12 in the backward: on a zero-variance row rstd = 1e6, which torch's CPU backward keeps in fp16 and
overflows to NaN where float64 is finite, and the gate makes a candidate reproduce torch's NaN."""
RMS_NORM_EPS = (None, 1e-6, 1e-5, 0.1)
RMS_NORM_DEFAULT_EPS = torch.finfo(torch.float32).eps
"""What eps=None means to torch.nn.functional.rms_norm: the epsilon of the float32 it computes in, for
half inputs too (its docs say x's dtype; its code uses the compute dtype)."""


def widths(max_n: int) -> st.SearchStrategy[int]:
    """A row length: the edge lengths that fit, or any size."""
    fitting = [w for w in WIDTHS if w <= max_n] or [1]
    return st.one_of(st.sampled_from(fitting), sizes(max(1, max_n)))


@st.composite
def _shape(draw: st.DrawFn, max_numel: int, row_lengths: st.SearchStrategy[int] | None = None) -> tuple[list[int], int]:
    if row_lengths is None:
        n = draw(widths(max_numel))
        norm = [n]
        if max_numel // n >= 2 and draw(st.booleans()):  # normalized over two dims
            norm = [draw(st.integers(2, min(4, max_numel // n))), n]
    else:  # the row length is drawn whole; two normalized dims where it splits
        n = draw(row_lengths)
        norm = [n]
        splits = [k for k in (2, 3, 4) if n % k == 0]
        if splits and draw(st.booleans()):
            k = draw(st.sampled_from(splits))
            norm = [k, n // k]
    # Few rows of many elements and many rows of few are both drawn, but rows stay under max_numel / 8:
    # under the interpreter every program costs time whatever its size.
    batch_budget = max(1, min(max_numel // math.prod(norm), max_numel // 8))
    batch = draw(shapes(0, 2, batch_budget, allow_empty=True))
    return batch + norm, len(norm)


def _eps_choices(rms: bool, backward: bool) -> tuple[float | None, ...]:
    return RMS_NORM_EPS if rms else LAYER_NORM_BACKWARD_EPS if backward else LAYER_NORM_EPS


def problems_for_config(space: SearchSpace, config: Config, max_numel: int, *, rms: bool,
                        backward: bool = False) -> st.SearchStrategy[dict]:
    """`problems` with row lengths in the power-of-two classes the config runs on (the spaces' constraints
    depend on the row length only through its class: single holds one class, looped all longer ones)."""
    classes = steered_classes(lambda n: space.rejects(config, {"shape": [PROBE_ROWS, n], "norm_dims": 1}) is None,
                              max_numel)
    if classes is None:
        return problems(max_numel, rms=rms, backward=backward)
    return problems(max_numel, rms=rms, backward=backward, row_lengths=sizes_in_classes(classes, max_numel))


def problems(max_numel: int, *, rms: bool, backward: bool = False,
             row_lengths: st.SearchStrategy[int] | None = None) -> st.SearchStrategy[dict]:
    """Problems of at most max_numel elements, edge cases first-class (row lengths from `row_lengths`
    where given)."""
    return _shape(max_numel, row_lengths).flatmap(
        lambda shape_dims: st.fixed_dictionaries(
            {
                "shape": st.just(shape_dims[0]),
                "norm_dims": st.just(shape_dims[1]),
                "weight": st.booleans(),
                "bias": st.just(False) if rms else st.booleans(),
                "residual": st.booleans(),
                "eps": st.sampled_from(_eps_choices(rms, backward)),
                "values": st.sampled_from(VALUES),
                "magnitude": magnitudes(),
                "layout": st.sampled_from(LAYOUTS),
                "fp32_params": st.booleans(),
            }
        )
    )


def problem(shape, *, rms: bool, norm_dims: int = 1, weight: bool = True, bias: bool | None = None,
            residual: bool = False, eps: float | None | str = "default", values: str = "random",
            magnitude: float = 1.0, layout: str = "contiguous", fp32_params: bool = False) -> dict:
    """A problem with the common choices filled in: affine, no residual, the default eps, random rows."""
    return {
        "shape": list(shape), "norm_dims": norm_dims, "weight": weight, "bias": (not rms) if bias is None else bias,
        "residual": residual, "eps": (None if rms else 1e-5) if eps == "default" else eps, "values": values,
        "magnitude": magnitude, "layout": layout, "fp32_params": fp32_params,
    }


def place(values: torch.Tensor, layout: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """values in dtype on device, laid out as named. The layout is made on the device, last: a move would
    make a strided view contiguous."""
    shape = list(values.shape)
    if layout == "contiguous" or not shape:
        return values.to(device=device, dtype=dtype)
    if layout == "padded":
        base = torch.zeros(shape[:-1] + [shape[-1] + 3], dtype=dtype, device=device)
        return base[..., : shape[-1]].copy_(values)
    base = torch.zeros(shape[:-1] + [2 * shape[-1]], dtype=dtype, device=device)
    return base[..., ::2].copy_(values)


def forward_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    """x, residual (or None), weight, bias (or None), normalized_shape and eps (resolved) of a problem."""
    gen = torch.Generator().manual_seed(seed)
    shape = list(problem["shape"])
    k = problem.get("norm_dims", 1)
    norm_shape = shape[len(shape) - k :]
    rows, n = row_shape(problem)
    kind = problem.get("values", "random")
    has_residual = problem.get("residual", False)
    # With a residual each addend gets half the scale, so the sum keeps the named one (and fp16 finite).
    scale = problem.get("magnitude", 1.0) * (0.5 if has_residual else 1.0)

    def rows_of_kind(offset: float) -> torch.Tensor:
        if kind == "constant":
            return (torch.randn(rows, 1, generator=gen) * scale).expand(rows, n).reshape(shape)
        if kind == "offset":
            return offset + torch.randn(shape, generator=gen)
        return torch.randn(shape, generator=gen) * scale

    layout = problem.get("layout", "contiguous")
    x = place(rows_of_kind(OFFSET), layout, dtype, device)
    residual = place(rows_of_kind(0.0), layout, dtype, device) if has_residual else None
    param_dtype = torch.float32 if problem.get("fp32_params") else dtype

    def param(present: bool, center: float) -> torch.Tensor | None:
        if not present:
            return None
        return (center + torch.randn(norm_shape, generator=gen)).to(device=device, dtype=param_dtype)

    eps = problem.get("eps")
    return {
        "x": x,
        "residual": residual,
        "weight": param(problem.get("weight", False), 1.0),
        "bias": param(problem.get("bias", False), 0.0),
        "normalized_shape": tuple(norm_shape),
        "eps": RMS_NORM_DEFAULT_EPS if eps is None else float(eps),
    }


def parse_shape(text: str, *, rms: bool) -> dict:
    """'8192x4096' -> rows of 4096 with weight (and bias for layer_norm); '8192x4096+res' adds a residual.
    The last size is normalized, the others are rows."""
    body, plus, suffix = text.strip().partition("+")
    if plus and suffix.strip().lower() not in ("res", "residual"):
        raise ValueError(f"shape {text!r}: the only suffix is '+res' (fuse a residual add), got '+{suffix}'")
    sizes_ = parse_sizes(body)
    if not sizes_:
        raise ValueError(f"shape {text!r}: expected sizes like 8192x4096")
    return problem(sizes_, rms=rms, residual=bool(plus))


def bucket_edges(prob: dict, *, rms: bool, backward: bool = False) -> list[dict]:
    """Problems a config tuned for prob's bucket must get right: the shortest and longest rows of the
    bucket (never a block multiple) and its own length, few rows, constant rows, offset rows, large
    values, tiny and large eps, strided layouts, with and without the affine parameters."""
    rows, n = row_shape(prob)
    full = next_pow2(n)
    lengths = sorted({max(1, full // 2 + 1), max(1, full - 1), n})
    few_rows = min(rows, 33) or 1  # keeps next_pow2(rows) >= any ROWS_PER_PROGRAM that fits the bucket
    residual = bool(prob.get("residual"))
    kinds = [
        dict(values="constant", layout="padded", eps=None if rms else min(_eps_choices(rms, backward))),
        dict(values="offset", layout="contiguous", weight=False, bias=False),
        dict(values="random", magnitude=1e4, layout="strided", fp32_params=True, eps=0.1),
    ]
    edges = []
    for i, length in enumerate(lengths):
        for j, kind in enumerate(kinds):
            rows_here = few_rows if (i + j) % 2 else min(rows, 3) or 1
            edges.append(problem([rows_here, length], rms=rms, residual=residual, **kind))
    return edges


def forward_cost(prob: dict, dtype: torch.dtype, *, rms: bool) -> Cost:
    """Reads x (and the residual), writes y (and the sum), reads the parameters once, writes the row stats."""
    rows, n = row_shape(prob)
    numel = rows * n
    streams = 4 if prob.get("residual") else 2
    param_bytes = 4 if prob.get("fp32_params") else dtype.itemsize
    params = int(bool(prob.get("weight"))) + int(bool(prob.get("bias")))
    stats = rows * 4 * (1 if rms else 2)
    return Cost(flops=8 * numel, bytes=numel * dtype.itemsize * streams + n * param_bytes * params + stats)


def backward_cost(prob: dict, dtype: torch.dtype, *, rms: bool) -> Cost:
    """Reads dy, x (and the sum's gradient), writes dx; reads the weight, writes its and the bias's gradients."""
    rows, n = row_shape(prob)
    numel = rows * n
    streams = 4 if prob.get("residual") else 3
    param_bytes = 4 if prob.get("fp32_params") else dtype.itemsize
    params = 2 * int(bool(prob.get("weight"))) + int(bool(prob.get("bias")))
    stats = rows * 4 * (1 if rms else 2)
    return Cost(flops=12 * numel, bytes=numel * dtype.itemsize * streams + n * param_bytes * params + stats)
