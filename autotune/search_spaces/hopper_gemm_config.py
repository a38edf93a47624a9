"""The configs of the Gluon Hopper GEMM (kernels/gemm/hopper_gemm.py): what each key may be, the shared memory and
registers a config takes, and why a config cannot run (`config_problem`). Plain Python, importable without Gluon; the
GEMM family's Gluon engine (gemm_gluon.py) judges its configs with it.

A config: BLOCK_M (the rows of one consumer warpgroup's accumulator), BLOCK_N (its columns; for the gated GEMM,
per projection: the gate's and the up projection's accumulators are each BLOCK_M x BLOCK_N), BLOCK_K,
NUM_STAGES (the depth of the shared-memory ring the TMA warp fills), NUM_CONSUMERS (1 or 2 warpgroups),
SCHEDULE ("cooperative": the consumers split the rows of one NUM_CONSUMERS * BLOCK_M tile and share its B
stage; "pingpong": each consumer owns whole BLOCK_M-row tiles, which the ring hands out in turn, so that one
consumer's epilogue runs while the other's wgmmas do), GROUP_M (row-tiles per group of the tile order, for
L2 reuse) and CONSUMER_REGISTERS (what setmaxnreg gives a consumer warpgroup).
"""

from __future__ import annotations

from autotune.search_spaces.flash_attn_gluon import (
    GLUON_TRITON,
    LOADER_REGISTERS,
    register_split,
    register_split_problem,
)

__all__ = ["GLUON_TRITON", "LOADER_REGISTERS", "register_split"]

SHARED_MEMORY_BYTES = 227 * 1024
"""Shared memory one H100 program may opt into."""
BARRIER_BYTES = 1024
"""Shared memory kept for the mbarriers and alignment, beyond the tiles."""
MAX_ACCUMULATOR_REGISTERS = 128
"""float32 accumulator registers a consumer thread may hold: past this the epilogue's and the addresses' registers
no longer fit the 240 a consumer gets, and ptxas spills or serializes the wgmmas."""
CHOICES = {
    "BLOCK_M": (64, 128),
    "BLOCK_N": (64, 128, 256),
    "BLOCK_K": (32, 64, 128),
    "NUM_STAGES": (2, 3, 4, 5, 6),
    "NUM_CONSUMERS": (1, 2),
    "SCHEDULE": ("cooperative", "pingpong"),
    "GROUP_M": (1, 4, 8, 16),
    "CONSUMER_REGISTERS": (232, 240),
}
DEFAULT_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_STAGES": 3, "NUM_CONSUMERS": 2,
                  "SCHEDULE": "cooperative", "GROUP_M": 8, "CONSUMER_REGISTERS": 240}  # fmt: skip
"""A 128 x 256 tile, two consumers of 64 rows each (the shape of Triton's and CUTLASS's fastest Hopper bf16 GEMMs)."""
DEFAULT_GATED_CONFIG = {**DEFAULT_CONFIG, "BLOCK_N": 128, "NUM_STAGES": 4}
"""The gated GEMM's: 128 rows by 128 columns of each projection, the accumulators of a 128 x 256 plain tile, a ring
of 4 stages: the fastest of benchmarks/hopper_gemm_probe.py's gated grid on an H100 (bf16 4096x4096x14336: 676
TFLOP/s, 1.04x the tuned Triton gated kernel; 3 stages 666)."""


def a_parts(config: dict) -> int:
    """A tiles one ring stage holds: one per consumer when they split a tile's rows, else one."""
    return config["NUM_CONSUMERS"] if config["SCHEDULE"] == "cooperative" else 1


def tile_rows(config: dict) -> int:
    """Rows of one output tile of the schedule."""
    return config["BLOCK_M"] * a_parts(config)


def accumulator_registers(config: dict, gated: bool) -> int:
    """float32 accumulator registers per consumer thread (a warpgroup is 128 threads)."""
    return (2 if gated else 1) * config["BLOCK_M"] * config["BLOCK_N"] // 128


def shared_memory_bytes(config: dict, gated: bool, element_size: int = 2) -> int:
    """Shared memory one program takes: the ring (A tiles, the B tile, the up projection's B tile where gated),
    an epilogue tile per consumer, the barriers."""
    stage = a_parts(config) * config["BLOCK_M"] * config["BLOCK_K"]
    stage += (2 if gated else 1) * config["BLOCK_N"] * config["BLOCK_K"]
    epilogue = config["NUM_CONSUMERS"] * config["BLOCK_M"] * config["BLOCK_N"]
    return (config["NUM_STAGES"] * stage + epilogue) * element_size + BARRIER_BYTES


def config_problem(config: dict, gated: bool = False) -> str | None:
    """Why the config cannot run (a key missing or out of CHOICES, a schedule its consumer count cannot take, a
    register split that shortchanges the first consumer, accumulators over the registers, tiles over the
    shared memory), or None."""
    for key, choices in CHOICES.items():
        if config.get(key) not in choices:
            return f"config[{key!r}] must be one of {choices}, got {config.get(key)!r}"
    consumers = config["NUM_CONSUMERS"]
    if config["SCHEDULE"] == "pingpong" and consumers != 2:
        return "SCHEDULE='pingpong' hands tiles to two consumers in turn: it needs NUM_CONSUMERS=2"
    why = register_split_problem(consumers, config["CONSUMER_REGISTERS"], CHOICES["CONSUMER_REGISTERS"])
    if why is not None:
        return why
    accumulators = accumulator_registers(config, gated)
    if accumulators > MAX_ACCUMULATOR_REGISTERS:
        what = "the gate's and the up projection's accumulators take" if gated else "the accumulator takes"
        return (
            f"{what} {accumulators} registers a thread at BLOCK_M={config['BLOCK_M']}, BLOCK_N={config['BLOCK_N']}, "
            f"over the {MAX_ACCUMULATOR_REGISTERS} a consumer can hold"
        )
    used = shared_memory_bytes(config, gated)
    if used > SHARED_MEMORY_BYTES:
        return f"the tiles take {used} bytes of shared memory, over the {SHARED_MEMORY_BYTES} a program may use"
    return None
