"""softmax's problems, shared by its forward and backward kernels: the Hypothesis strategy (shapes, dims, layouts,
-inf patterns, magnitudes), the inputs of a problem, its cost and its bucket's edge cases."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from autotune.gate.strategies import PROBE_ROWS, magnitudes, shapes, sizes_in_classes, steered_classes
from autotune.search_spaces.softmax import SPACE, row_shape
from autotune.space import next_pow2
from autotune.spec import Cost, Inputs, parse_sizes


def as_rows(t: torch.Tensor, dim: int) -> torch.Tensor | None:
    """t with dim moved last, viewed as (rows, N) without a copy; None where the layout does not allow it."""
    moved = t.movedim(dim, -1)
    try:
        return moved.view(-1, moved.shape[-1])
    except RuntimeError:
        return None


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


def problems_for_config(config: dict, dtype: torch.dtype, max_numel: int, space=SPACE) -> st.SearchStrategy[dict]:
    """`problems` with row lengths in the power-of-two classes the config runs on (the space's constraints
    depend on the row length only through its class: single holds one class, online all longer ones)."""
    classes = steered_classes(lambda n: space.rejects(config, {"shape": [PROBE_ROWS, n], "dim": -1}) is None, max_numel)
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


PRESETS = [parse_shape(f"4096x{n}") for n in (1024, 4096, 8192, 16384, 32768)] + [parse_shape("1024x131072")]
