"""mlp: Linear -> activation -> Linear as two tuned linear calls ("two_pass": the first writes the activated
hidden layer, never the pre-activation; each takes linear's own tuned config), or as one kernel
("fused") that computes each output tile from hidden chunks held in registers, so nothing hidden reaches
memory, at the price of recomputing the first product once per column of output tiles.

A problem has the sizes `m`, `k`, `h` (hidden), `n` and, from the search and the runtime, the `dtype`.
Constraints see the problem only through the dtype and the sizes rounded up to powers of two.
"""

from __future__ import annotations

from autotune.device_limits import Resources
from autotune.search_spaces.matmul import (
    MAX_ACC_REGISTERS,
    MAX_FMA_REGISTERS,
    MIN_BLOCK,
    MIN_TILE_PER_WARP,
    hardware,
    k_range,
)
from autotune.space import Config, Param, Problem, SearchSpace, next_pow2

BLOCKS_M = (16, 32, 64, 128)
BLOCKS_N = (16, 32, 64, 128, 256)
BLOCKS_H = (16, 32, 64, 128)
BLOCKS_K = (16, 32, 64, 128)
WARPS = (2, 4, 8)
STAGES = (1, 2, 3, 4)
MAX_RECOMPUTE = 4
"""The fused kernel computes the first product once per column of output tiles: at most this many times."""
ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2}

DEFAULT: Config = {
    "variant": "two_pass",
    "BLOCK_M": 64,
    "BLOCK_N": 64,
    "BLOCK_H": 64,
    "BLOCK_K": 32,
    "num_warps": 4,
    "num_stages": 2,
}
"""The fallback: two linear calls run on every problem (their tile parameters are linear's own)."""


def _dims(p: Problem) -> dict[str, int]:
    return {d: max(MIN_BLOCK, next_pow2(p[d])) for d in ("m", "k", "h", "n")}


def _itemsize(p: Problem) -> int:
    return ITEMSIZE[p.get("dtype", "fp32")]


def _two_pass_has_no_tiles(c: Config, p: Problem) -> str | None:
    if c["variant"] == "two_pass" and {k: v for k, v in c.items() if k != "variant"} != {
        k: v for k, v in DEFAULT.items() if k != "variant"
    }:
        return "two_pass launches linear with linear's configs: its own tile parameters are the default's"
    return None


def _fused_recomputes_little(c: Config, p: Problem) -> str | None:
    if c["variant"] == "fused" and -(-_dims(p)["n"] // c["BLOCK_N"]) > MAX_RECOMPUTE:
        return f"fused with more than {MAX_RECOMPUTE} columns of output tiles: the first product recomputed too often"
    return None


def _fused_blocks_fit(c: Config, p: Problem) -> str | None:
    if c["variant"] != "fused":
        return None
    d = _dims(p)
    if c["BLOCK_M"] > d["m"] or c["BLOCK_N"] > d["n"] or c["BLOCK_H"] > d["h"]:
        return "a block larger than the problem rounded up to a power of two: only masked lanes"
    lo, hi = k_range(p)
    if not lo <= c["BLOCK_K"] <= hi or c["BLOCK_K"] > max(d["k"], lo):
        return f"BLOCK_K outside {lo}..{min(hi, max(d['k'], lo))} for this dtype and K"
    return None


def _fused_fits_registers(c: Config, p: Problem) -> str | None:
    if c["variant"] != "fused":
        return None
    threads = 32 * c["num_warps"]
    acc = c["BLOCK_M"] * (c["BLOCK_N"] + c["BLOCK_H"])  # the output tile and the hidden chunk
    if c["BLOCK_M"] * min(c["BLOCK_N"], c["BLOCK_H"]) < MIN_TILE_PER_WARP * c["num_warps"]:
        return f"tiles under {MIN_TILE_PER_WARP} elements per warp: idle warps"
    if p.get("dtype", "fp32") == "fp32":
        if (acc + (c["BLOCK_M"] + c["BLOCK_H"]) * c["BLOCK_K"]) / threads > MAX_FMA_REGISTERS:
            return f"float32 tiles and operand slices > {MAX_FMA_REGISTERS} registers per thread"
    elif acc / threads > MAX_ACC_REGISTERS:
        return f"BLOCK_M * (BLOCK_N + BLOCK_H) / threads > {MAX_ACC_REGISTERS} accumulator registers per thread"
    return None


def shared_memory(c: Config, p: Problem) -> int:
    """Bytes of shared memory the fused kernel's program stages (two_pass: linear's own configs, checked by linear)."""
    if c["variant"] != "fused":
        return 0
    per_stage = (c["BLOCK_M"] + c["BLOCK_H"]) * c["BLOCK_K"]
    second = c["BLOCK_H"] * c["BLOCK_N"] + c["BLOCK_M"] * c["BLOCK_H"]  # the second product's operands
    return (per_stage * c["num_stages"] + second) * _itemsize(p)


def resources(c: Config, p: Problem) -> Resources:
    """What a config needs of a device (a GPU served another GPU's rows checks it)."""
    return Resources(shared_memory=shared_memory(c, p))


def _fused_fits_shared_memory(c: Config, p: Problem) -> str | None:
    smem = hardware()[0]
    if shared_memory(c, p) > smem:
        return f"the operand blocks of both products > {smem} bytes of shared memory"
    return None


def _suggest(trial, problem: Problem) -> Config:
    """Variant first; only the fused kernel draws tiles."""
    if trial.suggest_categorical("variant", ["two_pass", "fused"]) == "two_pass":
        return dict(DEFAULT)
    d = _dims(problem)
    lo, hi = k_range(problem)

    def pick(name: str, values: tuple[int, ...], cap: int, floor: int = 0) -> int:
        choices = sorted({v for v in values if floor <= v <= cap} | {DEFAULT[name]})
        return trial.suggest_categorical(name, choices)

    return {
        "variant": "fused",
        "BLOCK_M": pick("BLOCK_M", BLOCKS_M, d["m"]),
        "BLOCK_N": pick("BLOCK_N", BLOCKS_N, d["n"]),
        "BLOCK_H": pick("BLOCK_H", BLOCKS_H, d["h"]),
        "BLOCK_K": pick("BLOCK_K", BLOCKS_K, min(hi, max(d["k"], lo)), lo),
        "num_warps": trial.suggest_categorical("num_warps", list(WARPS)),
        "num_stages": trial.suggest_categorical("num_stages", list(STAGES)),
    }


SPACE = SearchSpace(
    params=(
        Param("variant", ("two_pass", "fused")),
        Param("BLOCK_M", BLOCKS_M),
        Param("BLOCK_N", BLOCKS_N),
        Param("BLOCK_H", BLOCKS_H),
        Param("BLOCK_K", BLOCKS_K),
        Param("num_warps", WARPS),
        Param("num_stages", STAGES),
    ),
    default=DEFAULT,
    constraints=(
        _two_pass_has_no_tiles,
        _fused_recomputes_little,
        _fused_blocks_fit,
        _fused_fits_registers,
        _fused_fits_shared_memory,
    ),
    suggest_fn=_suggest,
)


def bucket(problem: Problem) -> str:
    """m, k, h and n, each rounded up to a power of two."""
    return ",".join(f"{d}={next_pow2(problem[d])}" for d in ("m", "k", "h", "n"))
