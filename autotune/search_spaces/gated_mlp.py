"""gated_mlp: the one GEMM that computes act(x @ w_gate.T) * (x @ w_up.T). Each program holds two accumulator
tiles (gate and up) over the same rows of x, so a (BLOCK_M, BLOCK_N) config holds and stages what a
(BLOCK_M, 2 * BLOCK_N) tile of matmul does. The same parameters as matmul (split-K aside: the epilogue needs
both whole sums), the same four variants; on a Hopper GPU the Gluon GEMM's gated epilogue may run instead
(engine="gluon": search_spaces/gemm_gluon.py, without biases).

A problem has the sizes `m` (rows of x), `k` (its features), `h` (the gate and up projections' outputs, the
GEMM's N), `n` (the down projection's outputs, computed by linear at linear's own configs) and, from the search
and the runtime, the `dtype`. Constraints see the problem only through the dtype and the sizes rounded up to
powers of two, so a config that runs on one problem of a bucket runs on all of them.
"""

from __future__ import annotations

from autotune.device_limits import Resources
from autotune.search_spaces import gemm_gluon as gluon
from autotune.search_spaces import hopper_gemm_config
from autotune.search_spaces.matmul import (
    _GRID_VARIANT,
    BLOCKS_K,
    BLOCKS_MN,
    GROUPS,
    ITEMSIZE,
    MAX_ACC_REGISTERS,
    MAX_FMA_REGISTERS,
    MIN_BLOCK,
    MIN_REUSE,
    STAGES,
    VARIANTS,
    WARPS,
    _nearest,
    _no_idle_warps,
    _variant_available,
    hardware,
    k_range,
    tma_available,
)
from autotune.space import Config, Param, Problem, SearchSpace, next_pow2

DEFAULT: Config = {
    "variant": "tiled",
    "BLOCK_M": 64,
    "BLOCK_N": 64,
    "BLOCK_K": 32,
    "GROUP_M": 8,
    "num_warps": 4,
    "num_stages": 3,
    **gluon.TRITON,
}
"""The fallback: runs (and is right) on every problem, in every dtype, on every GPU."""

START_TILES = ((128, 128, 64, 8, 8, 3), (128, 64, 64, 8, 4, 4))
"""(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages) tried first on half-precision problems: not measured
for this kernel yet; the first holds and stages what linear's winning 128 x 256 tile does on the H100 (the shipped
rows at the Llama shapes), the second half of it."""


def _dims(p: Problem) -> tuple[int, int, int]:
    """The bucket's GEMM sizes: m, h (the GEMM's N) and k rounded up to powers of two, 16 at least."""
    return tuple(max(MIN_BLOCK, next_pow2(p[d])) for d in ("m", "h", "k"))  # type: ignore[return-value]


def _itemsize(p: Problem) -> int:
    return ITEMSIZE[p.get("dtype", "fp32")]


def tiles(c: Config, p: Problem) -> int:
    """Output tiles of the bucket's largest problem."""
    m, n, _ = _dims(p)
    return -(-m // c["BLOCK_M"]) * -(-n // c["BLOCK_N"])


def _is_default(c: Config) -> bool:
    return c == DEFAULT


def _block_k_fits_dtype(c: Config, p: Problem) -> str | None:
    lo, hi = k_range(p)
    if not lo <= c["BLOCK_K"] <= hi and not _is_default(c):
        return f"BLOCK_K outside {lo}..{hi} for {p.get('dtype', 'fp32')}"
    return None


def shared_memory(c: Config, p: Problem) -> int:
    """Bytes of shared memory a program stages: an x block and two weight blocks per pipeline stage."""
    return (c["BLOCK_M"] + 2 * c["BLOCK_N"]) * c["BLOCK_K"] * _itemsize(p) * c["num_stages"]


def resources(c: Config, p: Problem) -> Resources:
    """What a config needs of a device (a GPU served another GPU's rows checks it)."""
    if c.get("engine") == "gluon":
        used = hopper_gemm_config.shared_memory_bytes(gluon.kernel_config(c), gated=True, element_size=_itemsize(p))
        return Resources(shared_memory=used, tma=True)
    return Resources(shared_memory=shared_memory(c, p), tma=c["variant"].startswith("tma"))


def _fits_shared_memory(c: Config, p: Problem) -> str | None:
    smem = hardware()[0]
    if shared_memory(c, p) > smem:
        return f"num_stages * (BLOCK_M + 2 * BLOCK_N) * BLOCK_K * itemsize > {smem} bytes of shared memory"
    return None


def _fits_registers(c: Config, p: Problem) -> str | None:
    threads = 32 * c["num_warps"]
    acc = 2 * c["BLOCK_M"] * c["BLOCK_N"]  # the gate's and the up projection's tiles
    if p.get("dtype", "fp32") == "fp32":
        if (acc + (c["BLOCK_M"] + 2 * c["BLOCK_N"]) * c["BLOCK_K"]) / threads > MAX_FMA_REGISTERS:
            return f"float32 accumulators and operand slices > {MAX_FMA_REGISTERS} registers per thread"
    elif acc / threads > MAX_ACC_REGISTERS:
        return f"2 * BLOCK_M * BLOCK_N / threads > {MAX_ACC_REGISTERS} accumulator registers per thread"
    return None


def _blocks_fit_problem(c: Config, p: Problem) -> str | None:
    if _is_default(c):
        return None  # runs everywhere: masked lanes on small problems, only slower
    m, n, k = _dims(p)
    if c["BLOCK_M"] > m or c["BLOCK_N"] > n:
        return "a block larger than the problem rounded up to a power of two: only masked lanes"
    if c["BLOCK_M"] < min(m, MIN_REUSE) or c["BLOCK_N"] < min(n, MIN_REUSE):
        return f"a block under {MIN_REUSE} along M or N where the problem has {MIN_REUSE}: too little operand reuse"
    if c["BLOCK_K"] > max(k, k_range(p)[0]):
        return "BLOCK_K > K rounded up to a power of two: only masked lanes"
    return None


def _group_has_rows(c: Config, p: Problem) -> str | None:
    if _is_default(c) or c["GROUP_M"] == 1:
        return None
    m, n, _ = _dims(p)
    if c["GROUP_M"] > -(-m // c["BLOCK_M"]):
        return "GROUP_M > the tiles along M: the same order as GROUP_M = that number"
    if n <= c["BLOCK_N"]:
        return "GROUP_M > 1 with one tile along N: the same order as GROUP_M = 1"
    return None


def _persistent_has_tiles_to_share(c: Config, p: Problem) -> str | None:
    sms = hardware()[1]
    if c["variant"].endswith("persistent") and tiles(c, p) <= sms:
        return f"persistent with at most {sms} tiles: one tile per program, the grid variant's work"
    return None


def _stages_have_loads(c: Config, p: Problem) -> str | None:
    if _is_default(c):
        return None
    if c["num_stages"] > 1 + -(-_dims(p)[2] // c["BLOCK_K"]):
        return "num_stages > 1 + the blocks of K: buffers for loads that never happen"
    return None


CONSTRAINTS = (
    gluon.engine_fixes_the_others(gluon.GATED_FIXED),
    gluon.where_it_runs(gated=True),
    *map(
        gluon.triton_only,
        (
            _variant_available,
            _block_k_fits_dtype,
            _fits_shared_memory,
            _fits_registers,
            _no_idle_warps,
            _blocks_fit_problem,
            _group_has_rows,
            _persistent_has_tiles_to_share,
            _stages_have_loads,
        ),
    ),
)


_REPAIRS = (
    ("num_warps", WARPS, (_fits_registers, _no_idle_warps)),
    ("num_stages", STAGES, (_fits_shared_memory, _stages_have_loads)),
    ("GROUP_M", GROUPS, (_group_has_rows,)),
)
"""What a drawn config may have repaired, in order: each parameter with its values and the constraints it must pass."""


def _fitting_tile(config: Config, p: Problem) -> Config:
    """config with its larger block halved until both accumulators fit the registers of the most warps, the
    blocks kept at MIN_REUSE or more where the problem has that much."""
    m, n, _ = _dims(p)
    while _fits_registers({**config, "num_warps": max(WARPS)}, p):
        name = "BLOCK_N" if config["BLOCK_N"] >= config["BLOCK_M"] else "BLOCK_M"
        if config[name] // 2 < min(MIN_REUSE, m if name == "BLOCK_M" else n):
            break
        config = {**config, name: config[name] // 2}
    return config


def _block_choices(problem: Problem) -> dict[str, list[int]]:
    """The block sizes and GROUP_M values drawn for a problem (one distribution per name in a study: both engines
    draw from these)."""
    m, n, k = _dims(problem)
    lo, hi = k_range(problem)

    def pick(name: str, values: tuple[int, ...], low: int, high: int) -> list[int]:
        return sorted({v for v in values if low <= v <= high} | {DEFAULT[name]})

    return {
        "BLOCK_M": pick("BLOCK_M", BLOCKS_MN, min(m, MIN_REUSE), m),
        "BLOCK_N": pick("BLOCK_N", BLOCKS_MN, min(n, MIN_REUSE), n),
        "BLOCK_K": pick("BLOCK_K", BLOCKS_K, lo, min(max(k, lo), hi)),
        "GROUP_M": list(GROUPS),
    }


def _suggest_engines(trial, problem: Problem) -> Config:
    """The engine drawn where the Gluon kernel runs on the problem, then that engine's config."""
    if gluon.runs_on(problem, gated=True) and trial.suggest_categorical("engine", list(gluon.ENGINES)) == "gluon":
        return gluon.suggest(trial, _block_choices(problem), list(STAGES), gluon.GATED_FIXED, problem, gated=True)
    return _suggest(trial, problem)


def _suggest(trial, problem: Problem) -> Config:
    """Blocks drawn up to the bucket's sizes; GROUP_M only where there are tiles to group. A draw that does not
    fit is repaired, not wasted: a tile whose accumulators no number of warps holds shrinks, a persistent variant
    with too few tiles becomes its grid counterpart, then num_warps, num_stages and GROUP_M move to the nearest
    values that fit. The trial keeps the drawn values, the config the repaired ones."""
    m, n, k = _dims(problem)
    blocks = _block_choices(problem)
    variants = [v for v in VARIANTS if not v.startswith("tma") or tma_available()]
    config = {
        **gluon.TRITON,
        "variant": trial.suggest_categorical("variant", variants),
        **{name: trial.suggest_categorical(name, blocks[name]) for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K")},
        "GROUP_M": 1,
        "num_warps": trial.suggest_categorical("num_warps", list(WARPS)),
        "num_stages": trial.suggest_categorical("num_stages", list(STAGES)),
    }
    if m > config["BLOCK_M"] and n > config["BLOCK_N"]:
        config["GROUP_M"] = trial.suggest_categorical("GROUP_M", blocks["GROUP_M"])
    if {**config, "GROUP_M": DEFAULT["GROUP_M"]} == DEFAULT:
        return dict(DEFAULT)
    config["BLOCK_M"], config["BLOCK_N"] = min(config["BLOCK_M"], m), min(config["BLOCK_N"], n)
    config = _fitting_tile(config, problem)
    if _persistent_has_tiles_to_share(config, problem):
        config["variant"] = _GRID_VARIANT[config["variant"]]
    for name, values, checks in _REPAIRS:
        config = _nearest(config, name, values, problem, checks)
    return config


def _starts(p: Problem) -> list[Config]:
    """The Gluon kernel's default, where it runs (measured faster than the tuned Triton kernel on the gate/up
    product: hopper_gemm_config.DEFAULT_GATED_CONFIG); then START_TILES as persistent programs reading through
    descriptors, then as a grid; none for float32 (products on the FMA units, where other tiles fit) or where the
    GPU has no TMA unit."""
    if p.get("dtype", "fp32") == "fp32" or not tma_available():
        return []
    return gluon.starts(p, gluon.GATED_FIXED, gated=True) + [
        {
            **gluon.TRITON,
            "variant": v,
            "BLOCK_M": bm,
            "BLOCK_N": bn,
            "BLOCK_K": bk,
            "GROUP_M": g,
            "num_warps": w,
            "num_stages": s,
        }  # fmt: skip
        for bm, bn, bk, g, w, s in START_TILES
        for v in ("tma_persistent", "tma")
    ]


SPACE = SearchSpace(
    params=(
        Param("variant", VARIANTS),
        Param("BLOCK_M", BLOCKS_MN),
        Param("BLOCK_N", BLOCKS_MN),
        Param("BLOCK_K", BLOCKS_K),
        Param("GROUP_M", GROUPS),
        Param("num_warps", WARPS),
        Param("num_stages", STAGES),
        *gluon.PARAMS,  # since the Gluon engine: gated_mlp's spec `extends` the space without them
    ),
    default=DEFAULT,
    constraints=CONSTRAINTS,
    suggest_fn=_suggest_engines,
    starts_fn=_starts,
)


def bucket(problem: Problem) -> str:
    """m, k, h and n, each rounded up to a power of two."""
    return ",".join(f"{d}={next_pow2(problem[d])}" for d in ("m", "k", "h", "n"))
