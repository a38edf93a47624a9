"""rope (rotary position embedding of q and k, forward and backward): each program takes one (batch, position) row
and rotates its query and key heads in tiles of BLOCK_H heads, either all of them in a loop ("loop": cos and sin
read once per row) or one tile per program ("split": more programs where rows are few, as in decoding).

Every constraint depends on the problem only through the heads (H and Hk) and the head dim, which its bucket holds
as they are: a config that runs on one problem of a bucket runs on all of them.
"""

from __future__ import annotations

from autotune.space import Config, Param, Problem, SearchSpace, next_pow2

MAX_ELEMENTS_PER_THREAD = 64
"""A tile of BLOCK_H heads holds both halves of each head, in float32 registers."""
VARIANTS = ("loop", "split")
HEAD_BLOCKS = (1, 2, 4, 8, 16, 32, 64)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4)

DEFAULT: Config = {"variant": "loop", "BLOCK_H": 4, "num_warps": 4, "num_stages": 1}
"""The fallback: loop runs (and is right) on any number of heads and any head dim."""


def dims(problem: Problem) -> tuple[int, int, int, int, int]:
    """(batch, heads, kv_heads, seq, head_dim) of a problem."""
    return problem["batch"], problem["heads"], problem["kv_heads"], problem["seq"], problem["head_dim"]


def half_block(head_dim: int) -> int:
    """The tile width over half a head: head_dim / 2 rounded up to a power of two."""
    return next_pow2(max(1, head_dim // 2))


def _most_heads(p: Problem) -> int:
    _, h, hk, _, _ = dims(p)
    return next_pow2(max(h, hk, 1))


def _block_fits_heads(c: Config, p: Problem) -> str | None:
    if c != DEFAULT and c["BLOCK_H"] > _most_heads(p):
        return f"BLOCK_H > {_most_heads(p)} (the most heads, rounded up to a power of two): only masked lanes"
    return None


def _split_has_no_loop(c: Config, p: Problem) -> str | None:
    if c["variant"] == "split" and c["num_stages"] != 1:
        return "split rotates one tile per program: there is no loop to pipeline, num_stages must be 1"
    return None


def _fits_in_registers(c: Config, p: Problem) -> str | None:
    # Past this the compiler spills to local memory.
    if c != DEFAULT and 2 * c["BLOCK_H"] * half_block(p["head_dim"]) > MAX_ELEMENTS_PER_THREAD * 32 * c["num_warps"]:
        return f"BLOCK_H * head_dim > {MAX_ELEMENTS_PER_THREAD} elements per thread"
    return None


def _no_idle_warps(c: Config, p: Problem) -> str | None:
    # A tile smaller than the program's threads leaves warps with nothing to do; one warp is the floor.
    if c != DEFAULT and c["num_warps"] > 1 and c["BLOCK_H"] * half_block(p["head_dim"]) < 32 * c["num_warps"]:
        return "BLOCK_H * head_dim / 2 < 32 * num_warps: idle warps"
    return None


def _suggest(trial, problem: Problem) -> Config:
    """Variant first; split has no loop, so only loop draws its stages."""
    variant = trial.suggest_categorical("variant", list(VARIANTS))
    config = {
        "variant": variant,
        "BLOCK_H": trial.suggest_categorical("BLOCK_H", list(HEAD_BLOCKS)),
        "num_warps": trial.suggest_categorical("num_warps", list(WARPS)),
        "num_stages": 1,
    }
    if variant == "loop":
        config["num_stages"] = trial.suggest_categorical("num_stages", list(STAGES))
    return config


SPACE = SearchSpace(
    params=(
        Param("variant", VARIANTS),
        Param("BLOCK_H", HEAD_BLOCKS),
        Param("num_warps", WARPS),
        Param("num_stages", STAGES),
    ),
    default=DEFAULT,
    constraints=(_block_fits_heads, _split_has_no_loop, _fits_in_registers, _no_idle_warps),
    suggest_fn=_suggest,
)
"""The forward's and the backward's space: the backward is the same rotation, sin negated and transposed."""


def bucket(problem: Problem) -> str:
    """Rows (batch x positions) rounded up to a power of two; heads, key heads and head dim as they are."""
    b, h, hk, n, d = dims(problem)
    return f"rows={next_pow2(b * n)},h={h},hk={hk},d={d}"
