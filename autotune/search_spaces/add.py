"""vector_add: one block of elements per program."""

from autotune.space import Param, SearchSpace, next_pow2, powers_of_two

SPACE = SearchSpace(
    params=(
        Param("BLOCK_SIZE", powers_of_two(128, 16384)),
        Param("num_warps", (1, 2, 4, 8, 16)),
        Param("num_stages", (1, 2, 3)),
    ),
    default={"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 2},
    constraints=(
        # Fewer elements than threads leaves lanes idle and is never faster.
        lambda c, p: "BLOCK_SIZE < 32 * num_warps" if c["BLOCK_SIZE"] < 32 * c["num_warps"] else None,
    ),
)


def bucket(problem: dict) -> str:
    """Element count rounded up to a power of two."""
    n = 1
    for s in problem["shape"]:
        n *= s
    return f"n={next_pow2(n)}"
