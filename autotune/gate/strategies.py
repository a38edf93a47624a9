"""Hypothesis building blocks for problem strategies: edge sizes first-class, general sizes beside them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from hypothesis import strategies as st

from autotune.space import next_pow2

PRIMES = (2, 3, 5, 7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071)


def edge_sizes(max_size: int) -> st.SearchStrategy[int]:
    """Sizes that break tiling: 1, primes, and powers of two and their neighbours."""
    pow2 = [2**e for e in range(1, max(1, int(math.log2(max(max_size, 2)))) + 1)]
    near = sorted({n + d for n in pow2 for d in (-1, 0, 1)} | {1} | set(PRIMES))
    return st.sampled_from([n for n in near if 1 <= n <= max_size] or [1])


def sizes(max_size: int) -> st.SearchStrategy[int]:
    """A dimension size: edge cases half the time, anything in range otherwise."""
    return st.one_of(edge_sizes(max_size), st.integers(1, max(1, max_size)))


def shapes(min_rank: int, max_rank: int, max_numel: int, *, allow_empty: bool = False) -> st.SearchStrategy[list[int]]:
    """Tensor shapes with rank in [min_rank, max_rank] and at most max_numel elements."""

    @st.composite
    def draw(draw_: st.DrawFn) -> list[int]:
        rank = draw_(st.integers(min_rank, max_rank))
        shape: list[int] = []
        budget = max_numel
        for _ in range(rank):
            size = draw_(sizes(max(1, budget)))
            shape.append(size)
            budget = max(1, budget // size)
        if allow_empty and rank and draw_(st.integers(0, 9)) == 0:
            shape[draw_(st.integers(0, rank - 1))] = 0
        return shape

    return draw()


def sizes_between(lo: int, hi: int) -> st.SearchStrategy[int]:
    """A size in [lo, hi]: its ends and their neighbours, the primes and powers of two (and theirs) inside,
    or any size in between."""
    hi = max(lo, hi)
    pow2 = [2**e for e in range(hi.bit_length() + 1)]
    near = {lo, lo + 1, hi - 1, hi} | {n + d for n in pow2 for d in (-1, 0, 1)} | set(PRIMES)
    return st.one_of(st.sampled_from(sorted(n for n in near if lo <= n <= hi)), st.integers(lo, hi))


def class_floor(e: int) -> int:
    """The smallest size of power-of-two class e, (2**(e-1), 2**e] (1 for e = 0)."""
    return 2 ** (e - 1) + 1 if e else 1


def pow2_classes(fits: Callable[[int], bool], most: int) -> list[int]:
    """The exponents e with 2**e <= next_pow2(most) for which fits(2**e): where a constraint depends on a
    size only through next_pow2(size), the sizes it admits are those classes, (2**(e-1), 2**e] each."""
    return [e for e in range(next_pow2(max(1, most)).bit_length()) if fits(2**e)]


PROBE_ROWS = 1 << 20
"""Rows of the problems that probe which row lengths a config runs on: enough for any rows per program."""


def steered_classes(fits: Callable[[int], bool], most: int) -> list[int] | None:
    """`pow2_classes(fits, most)` where they narrow the draws; None where fits admits every class or none
    (then a config's problems are drawn as any config's)."""
    classes = pow2_classes(fits, most)
    return classes if 0 < len(classes) < len(pow2_classes(lambda n: True, most)) else None


def sizes_in_classes(exponents: Sequence[int], most: int) -> st.SearchStrategy[int]:
    """A size of at most `most` in one of the power-of-two classes (2**(e-1), 2**e], edge sizes first-class."""
    bands = [(class_floor(e), min(2**e, most)) for e in exponents if class_floor(e) <= most]
    return st.sampled_from(bands).flatmap(lambda band: sizes_between(*band))


def factorizations(n: int, parts: int) -> st.SearchStrategy[list[int]]:
    """`parts` sizes whose product is n (no sizes for n = 1, parts = 0): how a drawn number of elements
    becomes a shape."""
    if parts <= 1:
        return st.just([n] if parts else [])
    divisors = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divisors += [n // d for d in divisors]
    return st.sampled_from(sorted(set(divisors))).flatmap(
        lambda d: factorizations(n // d, parts - 1).map(lambda rest: [d, *rest])
    )


MAGNITUDES = (1.0, 1e-3, 1e4)
"""Scales for random values: ordinary, small, and large enough to expose one-pass formulas."""


def magnitudes() -> st.SearchStrategy[float]:
    return st.sampled_from(MAGNITUDES)
