"""The GEMM family's Gluon engine: configs of matmul and linear (search_spaces/matmul.py) and of gated_mlp's gate and
up projections (search_spaces/gated_mlp.py) with engine="gluon" run the persistent warp-specialized Hopper GEMM
written in Gluon (autotune/kernels/gemm/hopper_gemm.py) instead of the Triton kernels. They reuse BLOCK_M (one
consumer warpgroup's rows), BLOCK_N, BLOCK_K, GROUP_M and num_stages (the depth of the TMA ring), add
NUM_CONSUMERS, SCHEDULE and CONSUMER_REGISTERS (hopper_gemm_config.py says what each means), and fix the
Triton-only parameters to one value each; Triton configs fix the Gluon-only ones to the values every config
stored before them meant (`TRITON`), so neither engine multiplies the other's space.

The engine runs only where its kernel can: Triton 3.6's Gluon for Hopper, a Hopper GPU (sm_90), not the
interpreter; half inputs; one pair of matrices (no batch); for matmul and linear no bias and no activation (the
gated GEMM's act(g) * u is its own epilogue, without biases). Where a problem says how its operands sit in memory
(the gate's draws, a search's problem) the constraints also ask what TMA reads: a unit stride and every size a
multiple of 16 bytes. A call's problem at run time says only its bucket's numbers: there the launchers check the
call's tensors (`kernels/gemm/gluon_engine.py`) and take the best stored Triton config where the kernel cannot.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from autotune import gpu
from autotune.search_spaces import flash_attn_gluon
from autotune.search_spaces import hopper_gemm_config as kernel
from autotune.space import Config, Param, Problem, next_pow2

ENGINES = ("triton", "gluon")
PARAMS = (
    Param("engine", ENGINES),
    Param("NUM_CONSUMERS", (1, 2)),
    Param("SCHEDULE", ("cooperative", "pingpong")),
    Param("CONSUMER_REGISTERS", (232, 240)),
)
"""The parameters matmul's and gated_mlp's spaces gained with the Gluon engine."""
TRITON: Config = {"engine": "triton", "NUM_CONSUMERS": 1, "SCHEDULE": "cooperative", "CONSUMER_REGISTERS": 232}
"""The Gluon-only parameters of every Triton config: what the configs stored before the engine existed meant."""
MATMUL_FIXED: Config = {"variant": "tma_persistent", "num_warps": 4, "SPLIT_K": 1}
GATED_FIXED: Config = {"variant": "tma_persistent", "num_warps": 4}
"""The Triton-only parameters of every Gluon config (it is persistent, reads by TMA, owns whole tiles; num_warps=4 is
its warpgroup), in matmul's space and in gated_mlp's."""
CONSUMER_REGISTERS = flash_attn_gluon.CONSUMER_REGISTERS
"""The registers a consumer asks for, by their count (the most that leave the first consumer as many)."""
HALF = ("bf16", "fp16")
ALIGNED = 8
"""Elements of a half type in 16 bytes: TMA steps along a matrix's strides in multiples of 16 bytes."""
MIN_TILE = 64
"""The smallest tile side the kernel has (BLOCK_M and BLOCK_N): a bucket smaller than it still takes it."""
LAYOUT_KEYS = ("a_layout", "b_layout", "x_layout", "w_layout")
"""The problem keys that say how an operand sits in memory (matmul's, linear's and gated_mlp's)."""

is_triton = flash_attn_gluon.is_triton


def unavailable() -> str | None:
    """Why the Gluon kernels cannot run on this machine (the attention engine's reasons: no Gluon for Hopper, the
    interpreter, no GPU, not sm_90, another Triton), or None where they can."""
    return flash_attn_gluon.unavailable()


def kernel_config(c: Config) -> dict:
    """The Gluon kernel's own config (hopper_gemm's) of a config with engine="gluon"."""
    return {
        "BLOCK_M": c["BLOCK_M"],
        "BLOCK_N": c["BLOCK_N"],
        "BLOCK_K": c["BLOCK_K"],
        "NUM_STAGES": c["num_stages"],
        "GROUP_M": c["GROUP_M"],
        **{k: c[k] for k in ("NUM_CONSUMERS", "SCHEDULE", "CONSUMER_REGISTERS")},
    }


def _sizes(p: Problem, gated: bool) -> tuple[int, int, int]:
    """The GEMM's (M, N, K): gated_mlp's N is the gate's outputs, h."""
    return p["m"], p["h"] if gated else p["n"], p["k"]


def _problem_refuses(p: Problem, gated: bool) -> str | None:
    """Why the kernel cannot take p whatever its config, as far as p says (its bucket's numbers at run time)."""
    dtype = p.get("dtype", "fp32")
    if dtype not in HALF:
        return f"it takes {' and '.join(HALF)} inputs, not {dtype}"
    if p.get("batch", 0) > 1:
        return "it multiplies one pair of matrices: no batch"
    if p.get("bias"):
        return "it adds no bias: calls with one stay on the Triton kernels"
    if not gated and p.get("activation", "none") != "none":
        return "it applies no activation to a plain product: linear's with one stay on the Triton kernels"
    layouts = [p[key] for key in LAYOUT_KEYS if key in p]
    if "sliced" in layouts:
        return "TMA reads operands with a unit stride: a sliced one has none"
    if layouts and any(size % ALIGNED for size in _sizes(p, gated)):
        return f"TMA steps by multiples of 16 bytes: M, N and K must be multiples of {ALIGNED}"
    return None


def runs_on(p: Problem, gated: bool = False) -> bool:
    """Whether the Gluon engine can run problem p on this machine (some config of it)."""
    return unavailable() is None and _problem_refuses(p, gated) is None


def engine_fixes_the_others(fixed_for_gluon: Config) -> Callable[[Config, Problem], str | None]:
    """The constraint that each engine's configs set the other engine's parameters to one value each."""

    def engine_fixes_the_others(c: Config, p: Problem) -> str | None:
        fixed = fixed_for_gluon if c["engine"] == "gluon" else TRITON
        other = [k for k, v in fixed.items() if c[k] != v]
        if other:
            return f"engine={c['engine']} fixes {', '.join(f'{k}={v}' for k, v in fixed.items() if k in other)}"
        return None

    return engine_fixes_the_others


def _tile_problem(c: Config, p: Problem, gated: bool) -> str | None:
    """Why c's tile wastes itself on p's bucket: rows, columns or K past the bucket's (all masked), or GROUP_M
    ordering tiles that are not there."""
    m, n, k = (max(16, next_pow2(size)) for size in _sizes(p, gated))
    rows = kernel.tile_rows(kernel_config(c))
    if rows > max(MIN_TILE, m):
        return "a tile's rows (BLOCK_M x the cooperating consumers) exceed M rounded up to a power of two"
    if c["BLOCK_N"] > max(MIN_TILE, n):
        return "BLOCK_N exceeds N rounded up to a power of two: only masked columns"
    if c["BLOCK_K"] > max(min(kernel.CHOICES["BLOCK_K"]), k):
        return "BLOCK_K exceeds K rounded up to a power of two: only zeros read"
    if c["GROUP_M"] > 1 and (c["GROUP_M"] > -(-m // rows) or n <= c["BLOCK_N"]):
        return "GROUP_M > 1 orders tiles that are not there (too few along M, or one along N)"
    return None


def where_it_runs(gated: bool) -> Callable[[Config, Problem], str | None]:
    """The constraint: engine=gluon only where the Gluon kernel runs (this machine, the problem, the config)."""

    def gluon_where_it_runs(c: Config, p: Problem) -> str | None:
        if c["engine"] != "gluon":
            return None
        here = unavailable() if gpu.machine_matters() else None  # a stored row is judged as on its own GPU
        config = kernel_config(c)
        reason = (
            here or _problem_refuses(p, gated) or kernel.config_problem(config, gated) or _tile_problem(c, p, gated)
        )
        return None if reason is None else f"engine=gluon: {reason}"

    return gluon_where_it_runs


def triton_only(constraint: Callable[[Config, Problem], str | None]) -> Callable[[Config, Problem], str | None]:
    """constraint, applied to the Triton engine's configs only (it judges what the Triton kernels need)."""

    @functools.wraps(constraint)
    def check(c: Config, p: Problem) -> str | None:
        return None if c["engine"] == "gluon" else constraint(c, p)

    return check


def _nearest(value: int, values: tuple[int, ...]) -> int:
    return min(values, key=lambda v: (abs(v.bit_length() - value.bit_length()), v))


def suggest(trial, choices: dict[str, list], stages: list, fixed: Config, p: Problem, gated: bool) -> Config:
    """A Gluon config drawn from an Optuna trial: tiles, GROUP_M and stages from the Triton engine's choices (one
    distribution per name in a study), moved to the nearest the kernel has; its consumers (the schedule drawn only
    for two; the registers each count of them takes); then the tile narrower where its accumulators take too many
    registers, the ring shallower and its blocks shorter along K where they take too much shared memory."""
    count = trial.suggest_categorical("NUM_CONSUMERS", [1, 2])
    config = {
        **fixed,
        "engine": "gluon",
        "BLOCK_M": _nearest(trial.suggest_categorical("BLOCK_M", choices["BLOCK_M"]), kernel.CHOICES["BLOCK_M"]),
        "BLOCK_N": _nearest(trial.suggest_categorical("BLOCK_N", choices["BLOCK_N"]), kernel.CHOICES["BLOCK_N"]),
        "BLOCK_K": _nearest(trial.suggest_categorical("BLOCK_K", choices["BLOCK_K"]), kernel.CHOICES["BLOCK_K"]),
        "GROUP_M": trial.suggest_categorical("GROUP_M", choices["GROUP_M"]) if len(choices["GROUP_M"]) > 1 else 1,
        "num_stages": max(2, trial.suggest_categorical("num_stages", stages)),
        "NUM_CONSUMERS": count,
        "SCHEDULE": trial.suggest_categorical("SCHEDULE", ["cooperative", "pingpong"]) if count == 2 else "cooperative",
        "CONSUMER_REGISTERS": CONSUMER_REGISTERS[count],
    }
    while kernel.accumulator_registers(kernel_config(config), gated) > kernel.MAX_ACCUMULATOR_REGISTERS:
        config["BLOCK_N"] //= 2
    while config["num_stages"] > 2 and kernel.config_problem(kernel_config(config), gated):
        config["num_stages"] -= 1
    while config["BLOCK_K"] > min(kernel.CHOICES["BLOCK_K"]) and kernel.config_problem(kernel_config(config), gated):
        config["BLOCK_K"] //= 2
    return _ungrouped_where_nothing_to_group(config, p, gated)


def _ungrouped_where_nothing_to_group(config: Config, p: Problem, gated: bool) -> Config:
    """config with GROUP_M = 1 where only its grouping wastes it on p (the same tile order)."""
    if _tile_problem({**config, "GROUP_M": 1}, p, gated) is None and _tile_problem(config, p, gated):
        return {**config, "GROUP_M": 1}
    return config


def starts(p: Problem, fixed: Config, gated: bool) -> list[Config]:
    """The kernel's default config (hopper_gemm_config's, the shape of Triton's and CUTLASS's fastest Hopper bf16
    GEMMs; not yet timed here), where the engine runs on p."""
    if not runs_on(p, gated):
        return []
    default = kernel.DEFAULT_GATED_CONFIG if gated else kernel.DEFAULT_CONFIG
    config = {**fixed, "engine": "gluon", **{k: v for k, v in default.items() if k != "NUM_STAGES"}}
    return [_ungrouped_where_nothing_to_group({**config, "num_stages": default["NUM_STAGES"]}, p, gated)]
