"""group_norm: each (sample, group) is C/G channels x H*W spatial elements, normalized together.

Three ways to cover a group: held whole in registers by one program ("single": one read, one write),
streamed twice by one program ("looped": a statistics pass, then a normalize pass), or cut along H*W
across SPLIT programs that reduce partial statistics, then normalize ("split": for few groups and huge
H*W, where one program per group leaves SMs idle). The backward uses the same three shapes. The forward
also streams a group twice with its first pass kept in L2 for the second ("cached": one read from memory
where a group is too large for one program's registers but the groups in flight fit L2), and holds a group
whole in its own dtype with its statistics taken in one pass ("onepass": single's shape in fewer registers).

Programs work on a [BLOCK_C, BLOCK_HW] tile of BLOCK elements; `tile_shape` picks it from BLOCK, the
group's channel count and spatial size (each rounded up to a power of two) and the memory layout.
Every constraint depends on the problem only through those powers of two, which are fields of its
bucket: a config that runs on one problem of a bucket runs on all of them.
"""

from __future__ import annotations

import math

from autotune.space import Config, Param, Problem, SearchSpace, next_pow2, powers_of_two
from autotune.spec import parse_bucket

MIN_BLOCK = 16
MAX_BLOCK = 131072
SPLITS = (1, 2, 4, 8, 16, 32, 64)
WARPS = (1, 2, 4, 8, 16, 32)
STAGES = (1, 2, 3, 4)
MAX_ELEMENTS_PER_THREAD = 128
"""Forward: one tile in registers (float32 for 16-bit data); past this the compiler spills to local memory."""
MAX_ELEMENTS_PER_THREAD_BACKWARD = 64
"""Backward: x and dy tiles live together, so half as many elements fit."""
MAX_CACHED_GROUP = 131072
"""Largest group (elements, padded to powers of two) "cached" keeps in L2 between its passes: one such group in
flight per SM of an H100 (132) is 35 MB of float16 in its 50 MB L2."""
FIRST_VARIANTS = ("single", "looped", "split")
"""The variants of both directions; the forward's space gained "cached" and then "onepass" since (its spec
`extends` the spaces without them)."""
CACHED_VARIANTS = (*FIRST_VARIANTS, "cached")
"""The forward's variants before "onepass"."""
FORWARD_VARIANTS = (*CACHED_VARIANTS, "onepass")
WHOLE_GROUP_VARIANTS = ("single", "onepass")
"""The variants whose one program holds a whole group in one tile: their block follows from the group."""

DEFAULT: Config = {"variant": "looped", "BLOCK": 1024, "SPLIT": 1, "num_warps": 4, "num_stages": 2}
"""The fallback: looped covers a group of any size, so it runs (and is right) on every problem."""
BACKWARD_DEFAULT: Config = {**DEFAULT, "REDUCE": "partials"}
"""Deterministic: per-(sample, channel) partial sums, then a reduce over samples; no atomics."""


def group_shape(problem: Problem) -> tuple[int, int, int]:
    """(N * G, C / G, H * W): how many groups there are, their channel count and spatial size."""
    shape = list(problem["shape"])
    groups = problem["groups"]
    return shape[0] * groups, shape[1] // groups, math.prod(shape[2:])


def channels_inner(problem: Problem) -> bool:
    """Whether a group's channels are the fastest-moving index in memory (channels_last): then the
    tile is laid out channels first. With one spatial position or one channel the layouts coincide."""
    shape = problem["shape"]
    return problem.get("layout") == "channels_last" and math.prod(shape[2:]) > 1 and shape[1] > 1


def tile_shape(block: int, cg: int, hw: int, inner_channels: bool) -> tuple[int, int]:
    """(BLOCK_C, BLOCK_HW) with BLOCK_C * BLOCK_HW == block, for a region of cg channels x hw positions.

    The dim that is contiguous in memory gets the block first, so loads coalesce; the other takes what
    is left. Only a region smaller than the block pads, and it pads the contiguous dim.
    """
    cg, hw = next_pow2(cg), next_pow2(hw)
    fast, slow = (cg, hw) if inner_channels else (hw, cg)
    block_fast = min(fast, block)
    block_slow = min(slow, block // block_fast)
    block_fast = block // block_slow
    return (block_fast, block_slow) if inner_channels else (block_slow, block_fast)


def group_block(problem: Problem) -> int:
    """The tile that holds a whole group: channels and positions, each rounded up to a power of two."""
    _, cg, hw = group_shape(problem)
    return max(MIN_BLOCK, next_pow2(cg) * next_pow2(hw))


def split_region(config: Config, problem: Problem) -> int:
    """Spatial positions each of SPLIT programs covers (as a power of two)."""
    return max(1, next_pow2(group_shape(problem)[2]) // config["SPLIT"])


def _is_default(c: Config) -> bool:
    return all(c[k] == v for k, v in DEFAULT.items())


def _split_matches_variant(c: Config, p: Problem) -> str | None:
    if c["variant"] == "split" and c["SPLIT"] == 1:
        return "split needs SPLIT >= 2 programs per group"
    if c["variant"] != "split" and c["SPLIT"] != 1:
        return f"{c['variant']} runs one program per group: SPLIT must be 1"
    return None


def _block_fits_variant(c: Config, p: Problem) -> str | None:
    whole = group_block(p)
    if c["variant"] in WHOLE_GROUP_VARIANTS and c["BLOCK"] != whole:
        # Smaller cannot hold the group; larger only adds masked lanes.
        return f"{c['variant']} needs BLOCK == {whole} (channels x positions, each rounded up to a power of two)"
    if c["variant"] == "looped" and c["BLOCK"] >= whole and not _is_default(c):
        # One tile per group: looped reads it twice where single reads it once. The default is exempt
        # because the runtime falls back to it on every problem; it is right there, only slower.
        return "looped with a block that holds the whole group: single reads it once instead of twice"
    if c["variant"] == "split":
        _, cg, hw = group_shape(p)
        if c["SPLIT"] > next_pow2(hw):
            return "SPLIT exceeds the spatial size rounded up to a power of two"
        if c["BLOCK"] > max(MIN_BLOCK, next_pow2(cg) * split_region(c, p)):
            return "BLOCK larger than the part of the group each split program covers"
    return None


def _cached_tiles_a_group_that_fits_l2(c: Config, p: Problem) -> str | None:
    if c["variant"] != "cached":
        return None
    whole = group_block(p)
    if c["BLOCK"] >= whole:
        return "cached with a block that holds the whole group: single reads it once from registers instead"
    if whole > MAX_CACHED_GROUP:
        return f"cached keeps groups of at most {MAX_CACHED_GROUP} elements in L2 between its passes"
    return None


def _single_has_no_loop(c: Config, p: Problem) -> str | None:
    if c["variant"] in WHOLE_GROUP_VARIANTS and c["num_stages"] != 1:
        return f"{c['variant']} has no loop to pipeline: num_stages must be 1"
    return None


def _fits_in_registers(limit: int):
    def constraint(c: Config, p: Problem) -> str | None:
        if c["BLOCK"] > limit * 32 * c["num_warps"]:
            return f"BLOCK > {limit} elements per thread"
        return None

    return constraint


def _no_idle_warps(c: Config, p: Problem) -> str | None:
    # A tile smaller than the program's threads leaves warps with nothing to do; one warp is the floor.
    if c["num_warps"] > 1 and c["BLOCK"] < 32 * c["num_warps"]:
        return "BLOCK < 32 * num_warps: idle warps"
    return None


def _suggest(trial, problem: Problem, variants: tuple[str, ...] = FORWARD_VARIANTS) -> Config:
    """Variant first; a whole-group variant's block and stages follow from the group, so only the others draw
    them."""
    variant = trial.suggest_categorical("variant", list(variants))
    warps = trial.suggest_categorical("num_warps", list(WARPS))
    if variant in WHOLE_GROUP_VARIANTS:
        # A group past the largest block gets the largest, which the constraints then reject.
        block = min(group_block(problem), MAX_BLOCK)
        return {"variant": variant, "BLOCK": block, "SPLIT": 1, "num_warps": warps, "num_stages": 1}
    split = trial.suggest_categorical("SPLIT", list(SPLITS[1:])) if variant == "split" else 1
    return {
        "variant": variant,
        "BLOCK": trial.suggest_categorical("BLOCK", list(powers_of_two(MIN_BLOCK, MAX_BLOCK))),
        "SPLIT": split,
        "num_warps": warps,
        "num_stages": trial.suggest_categorical("num_stages", list(STAGES)),
    }


def _suggest_backward(trial, problem: Problem) -> Config:
    config = _suggest(trial, problem, FIRST_VARIANTS)
    return {**config, "REDUCE": trial.suggest_categorical("REDUCE", ["partials", "atomic"])}


_PARAMS = (
    Param("BLOCK", powers_of_two(MIN_BLOCK, MAX_BLOCK)),
    Param("SPLIT", SPLITS),
    Param("num_warps", WARPS),
    Param("num_stages", STAGES),
)
_CONSTRAINTS = (_split_matches_variant, _block_fits_variant, _single_has_no_loop, _no_idle_warps)

SPACE = SearchSpace(
    params=(Param("variant", FORWARD_VARIANTS), *_PARAMS),
    default=DEFAULT,
    constraints=(*_CONSTRAINTS, _cached_tiles_a_group_that_fits_l2, _fits_in_registers(MAX_ELEMENTS_PER_THREAD)),
    suggest_fn=_suggest,
)

BACKWARD_SPACE = SearchSpace(
    params=(Param("variant", FIRST_VARIANTS), *_PARAMS, Param("REDUCE", ("partials", "atomic"))),
    default=BACKWARD_DEFAULT,
    constraints=(*_CONSTRAINTS, _fits_in_registers(MAX_ELEMENTS_PER_THREAD_BACKWARD)),
    suggest_fn=_suggest_backward,
)
"""REDUCE: how the per-channel weight and bias gradients are summed over samples and split programs:
partial sums per (sample, split part, channel) then a reduce kernel ("partials", deterministic), or
atomic adds into one sum per channel ("atomic"); both in the kernels' arithmetic dtype."""


def bucket(problem: Problem) -> str:
    """Groups (N * G), channels per group, spatial size, each rounded up to a power of two; and whether
    channels are innermost. The activation is left out: a few more flops per element in a kernel
    bound by memory do not change which config is fastest enough to tune it separately."""
    rows, cg, hw = group_shape(problem)
    return f"ng={next_pow2(rows)},cg={next_pow2(cg)},hw={next_pow2(hw)},cl={int(channels_inner(problem))}"


def bucket_distance(a: str, b: str) -> float:
    """How far apart two buckets are in what decides the config: the elements a group holds (channels x
    positions: they pick single, looped or split, and the block) and how many groups there are (the
    parallelism), as |log2| differences, plus 1 where the layouts differ; infinite for a key that is not a
    group_norm bucket. The generic rule, channels and positions apart, ranks a bucket whose groups have
    the same channel count above one whose groups have the same size."""
    fa, fb = _bucket_fields(a), _bucket_fields(b)
    if fa is None or fb is None:
        return math.inf
    return (
        abs(math.log2(fa["cg"] * fa["hw"]) - math.log2(fb["cg"] * fb["hw"]))
        + abs(math.log2(fa["ng"]) - math.log2(fb["ng"]))
        + abs(fa["cl"] - fb["cl"])
    )


def _bucket_fields(key: str) -> dict[str, int] | None:
    fields = parse_bucket(key)
    try:
        values = {name: int(fields[name]) for name in ("ng", "cg", "hw", "cl")}
    except (KeyError, ValueError):
        return None
    return values if min(values["ng"], values["cg"], values["hw"]) > 0 else None
