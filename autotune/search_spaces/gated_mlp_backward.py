"""gated_mlp_backward: the gated MLP backward's elementwise step, dg = dh * u * act'(g) and du = dh * act(g), one
program per row and BLOCK columns (gated.py's `_gated_backward_kernel`). It only streams memory: the search sizes
the block and the warps that stream it.

Every constraint depends on the problem only through next_pow2(h), a number of its bucket: a config that runs on one
problem of a bucket runs on all of them.
"""

from __future__ import annotations

from autotune.space import Config, Param, Problem, SearchSpace, next_pow2, powers_of_two

MIN_BLOCK = 16
MAX_ELEMENTS_PER_THREAD = 32
"""Per thread, a BLOCK holds dh, g and u and their float32 products: past this the compiler spills."""

DEFAULT: Config = {"BLOCK": 1024, "num_warps": 4}
"""The fallback (what the backward launched before it was searched): right on every row length, the columns past
the row masked."""


def full_block(h: int) -> int:
    """The block that holds a row of h columns: h rounded up to a power of two, at least MIN_BLOCK."""
    return max(MIN_BLOCK, next_pow2(h))


def _block_fits_row(c: Config, p: Problem) -> str | None:
    # A larger block only adds masked lanes. The default is exempt: the runtime falls back to it on every problem.
    if c["BLOCK"] > full_block(p["h"]) and c != DEFAULT:
        return f"BLOCK > {full_block(p['h'])} (the row rounded up to a power of two): only masked lanes added"
    return None


def _fits_in_registers(c: Config, p: Problem) -> str | None:
    if c["BLOCK"] > MAX_ELEMENTS_PER_THREAD * 32 * c["num_warps"]:
        return f"BLOCK > {MAX_ELEMENTS_PER_THREAD} elements per thread"
    return None


def _no_idle_warps(c: Config, p: Problem) -> str | None:
    # A block smaller than the program's threads leaves warps with nothing to do; one warp is the floor.
    if c["num_warps"] > 1 and c["BLOCK"] < 32 * c["num_warps"]:
        return "BLOCK < 32 * num_warps: idle warps"
    return None


SPACE = SearchSpace(
    params=(Param("BLOCK", powers_of_two(MIN_BLOCK, 8192)), Param("num_warps", (1, 2, 4, 8, 16))),
    default=DEFAULT,
    constraints=(_block_fits_row, _fits_in_registers, _no_idle_warps),
)


def bucket(problem: Problem) -> str:
    """Rows and row length (h), each rounded up to a power of two; the activation is left out (the step streams
    memory whichever it computes)."""
    return f"m={next_pow2(problem['m'])},h={next_pow2(problem['h'])}"
