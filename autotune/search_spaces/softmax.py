"""softmax: one row per program slot, either held whole in registers ("single") or streamed twice ("online").
Its backward (dx = y * (dy - sum(dy * y)) from the saved output y) has the same two shapes: a row of y and dy
held whole ("single": one read of each, one write) or streamed twice, a pass for the sum and one for dx ("online").

Every constraint depends on the problem only through next_pow2(rows) and next_pow2(N), the two numbers
of its bucket: a config that runs on one problem of a bucket runs on all of them.
"""

from __future__ import annotations

import math

from autotune.space import Config, Param, Problem, SearchSpace, next_pow2, powers_of_two

MIN_BLOCK = 16
MAX_ELEMENTS_PER_THREAD = 128
MAX_BACKWARD_ELEMENTS_PER_THREAD = 64
"""The backward holds two tiles (y and dy) where the forward holds one."""
MAX_MULTI_ROW_BLOCK = 4096

DEFAULT: Config = {"variant": "online", "BLOCK_SIZE": 1024, "ROWS_PER_PROGRAM": 1, "num_warps": 4, "num_stages": 2}
"""The fallback: online loops over a row of any length, so it runs (and is right) on every problem."""


def row_shape(problem: Problem) -> tuple[int, int]:
    """(rows, N): how many independent rows the softmax normalizes, and their length."""
    shape = list(problem["shape"])
    dim = problem.get("dim", -1) % len(shape)
    return math.prod(shape[:dim] + shape[dim + 1 :]), shape[dim]


def _full_block(n: int) -> int:
    return max(MIN_BLOCK, next_pow2(n))


def _block_fits_variant(c: Config, p: Problem) -> str | None:
    full = _full_block(row_shape(p)[1])
    if c["variant"] == "single" and c["BLOCK_SIZE"] != full:
        # Smaller cannot hold the row; larger only adds masked lanes.
        return f"single needs BLOCK_SIZE == {full} (the row length rounded up to a power of two)"
    if c["variant"] == "online" and c["BLOCK_SIZE"] >= full and c != DEFAULT:
        # One chunk per row: online reads the row twice where single reads it once. The default is
        # exempt because the runtime falls back to it on every problem; it is right there, only slower.
        return "online with a block that holds the whole row: single reads it once instead of twice"
    return None


def _single_has_no_loop(c: Config, p: Problem) -> str | None:
    if c["variant"] == "single" and c["num_stages"] != 1:
        return "single has no loop to pipeline: num_stages must be 1"
    return None


def _fits_in_registers(c: Config, p: Problem) -> str | None:
    # The tile lives in registers; past this the compiler spills to local memory.
    if c["ROWS_PER_PROGRAM"] * c["BLOCK_SIZE"] > MAX_ELEMENTS_PER_THREAD * 32 * c["num_warps"]:
        return f"ROWS_PER_PROGRAM * BLOCK_SIZE > {MAX_ELEMENTS_PER_THREAD} elements per thread"
    return None


def _backward_fits_in_registers(c: Config, p: Problem) -> str | None:
    if c["ROWS_PER_PROGRAM"] * c["BLOCK_SIZE"] > MAX_BACKWARD_ELEMENTS_PER_THREAD * 32 * c["num_warps"]:
        return (
            f"ROWS_PER_PROGRAM * BLOCK_SIZE > {MAX_BACKWARD_ELEMENTS_PER_THREAD} elements per thread (y and dy tiles)"
        )
    return None


def _no_idle_warps(c: Config, p: Problem) -> str | None:
    # A tile smaller than the program's threads leaves warps with nothing to do; one warp is the floor.
    if c["num_warps"] > 1 and c["ROWS_PER_PROGRAM"] * c["BLOCK_SIZE"] < 32 * c["num_warps"]:
        return "ROWS_PER_PROGRAM * BLOCK_SIZE < 32 * num_warps: idle warps"
    return None


def _rows_only_for_short_blocks(c: Config, p: Problem) -> str | None:
    # Several rows per program amortize launch and reduction cost over short rows; a long row fills a program alone.
    if c["ROWS_PER_PROGRAM"] > 1 and c["BLOCK_SIZE"] > MAX_MULTI_ROW_BLOCK:
        return f"ROWS_PER_PROGRAM > 1 needs BLOCK_SIZE <= {MAX_MULTI_ROW_BLOCK}"
    return None


def _rows_exist(c: Config, p: Problem) -> str | None:
    # Row slots past the last row are masked work in every program.
    if c["ROWS_PER_PROGRAM"] > next_pow2(row_shape(p)[0]):
        return "ROWS_PER_PROGRAM exceeds the number of rows rounded up to a power of two"
    return None


def _suggest(trial, problem: Problem) -> Config:
    """Variant first; single's block and stages follow from the row, so only online draws them."""
    variant = trial.suggest_categorical("variant", ["single", "online"])
    rows = trial.suggest_categorical("ROWS_PER_PROGRAM", [1, 2, 4, 8, 16])
    warps = trial.suggest_categorical("num_warps", [1, 2, 4, 8, 16, 32])
    if variant == "single":
        return {
            "variant": variant,
            "BLOCK_SIZE": _full_block(row_shape(problem)[1]),
            "ROWS_PER_PROGRAM": rows,
            "num_warps": warps,
            "num_stages": 1,
        }
    return {
        "variant": variant,
        "BLOCK_SIZE": trial.suggest_categorical("BLOCK_SIZE", list(powers_of_two(MIN_BLOCK, 131072))),
        "ROWS_PER_PROGRAM": rows,
        "num_warps": warps,
        "num_stages": trial.suggest_categorical("num_stages", [1, 2, 3, 4]),
    }


_PARAMS = (
    Param("variant", ("single", "online")),
    Param("BLOCK_SIZE", powers_of_two(MIN_BLOCK, 131072)),
    Param("ROWS_PER_PROGRAM", (1, 2, 4, 8, 16)),
    Param("num_warps", (1, 2, 4, 8, 16, 32)),
    Param("num_stages", (1, 2, 3, 4)),
)

SPACE = SearchSpace(
    params=_PARAMS,
    default=DEFAULT,
    constraints=(
        _block_fits_variant,
        _single_has_no_loop,
        _fits_in_registers,
        _no_idle_warps,
        _rows_only_for_short_blocks,
        _rows_exist,
    ),
    suggest_fn=_suggest,
)

BACKWARD_SPACE = SearchSpace(
    params=_PARAMS,
    default=DEFAULT,
    constraints=(
        _block_fits_variant,
        _single_has_no_loop,
        _backward_fits_in_registers,
        _no_idle_warps,
        _rows_only_for_short_blocks,
        _rows_exist,
    ),
    suggest_fn=_suggest,
)
"""The backward's: the forward's parameters and default, half the elements a thread may hold."""


def bucket(problem: Problem) -> str:
    """Rows and row length, each rounded up to a power of two."""
    rows, n = row_shape(problem)
    return f"m={next_pow2(rows)},n={next_pow2(n)}"
