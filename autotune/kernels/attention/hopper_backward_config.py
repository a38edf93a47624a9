"""The Gluon attention backward's config (hopper_backward.py): what each key may be, the shared memory its
kernels take, and why a config cannot run at a head dim. A config is a dict:

- BLOCK_M: queries per step of the dK/dV kernel (keys per step of the dQ kernel);
- BLOCK_N: keys one consumer warpgroup of the dK/dV kernel holds (queries one of the dQ kernel holds): 64, one
  wgmma's rows, as FlashAttention-3 has it (128 would hold dK and dV in 128 registers a thread at head dim 64,
  and S^T in another 64: they spill);
- NUM_STAGES: depth of the ring the loader streams (Q and dO blocks; K and V blocks for the dQ kernel);
- NUM_CONSUMERS: consumer warpgroups a program; CONSUMER_REGISTERS: registers each asks for (register_split);
- DQ: "atomic" (each consumer of the dK/dV kernel adds its dQ of each query block into a float32 buffer by TMA
  reduce-add), "combined" (the second consumer adds the first's dQ to its own in shared memory and issues one
  reduce-add for both: half the adds into L2, as FlashAttention-3 has one a program) or "separate" (a kernel of
  its own, no atomics);
- SPLIT_DS: dS's rounding remainder as a second matmul operand (flash_attn_backward's ds="split");
- EARLY_DP: dP^T = V dO^T issued with S^T, so that it runs during the exponentials (its accumulator then held
  through them: more registers), or after P^T is stored.
"""

from __future__ import annotations

from autotune.search_spaces.flash_attn_gluon import (  # noqa: F401 (BARRIER_BYTES: for the kernel's callers)
    BARRIER_BYTES,
    HEAD_DIMS,
    SHARED_MEMORY_BYTES,
    register_split,
)

CHOICES = {
    "BLOCK_M": (64, 128),
    "BLOCK_N": (64,),
    "NUM_STAGES": (1, 2, 3, 4),
    "NUM_CONSUMERS": (1, 2),
    "CONSUMER_REGISTERS": (192, 200, 216, 232, 240),
    "DQ": ("atomic", "combined", "separate"),
    "SPLIT_DS": (False, True),
    "EARLY_DP": (False, True),
}
"""What each key of the kernel's config may be."""
DEFAULT_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 2, "NUM_CONSUMERS": 2, "CONSUMER_REGISTERS": 240,
                  "DQ": "atomic", "SPLIT_DS": False, "EARLY_DP": False}  # fmt: skip
"""FlashAttention-3's shape for head dim 128: two consumer warpgroups of 64 keys each, 64-query blocks, dQ by
atomics."""


def shared_memory_bytes(config: dict, head_dim: int, element_size: int = 2) -> int:
    """Shared memory the dK/dV kernel takes (the dQ kernel takes less): K and V per consumer, the Q/dO ring, the
    P^T and dS^T tiles (and dS^T's remainder) per consumer, and a float32 dQ tile per consumer ("atomic") or one
    ("combined")."""
    m, n, stages, consumers = (config[k] for k in ("BLOCK_M", "BLOCK_N", "NUM_STAGES", "NUM_CONSUMERS"))
    held = 2 * consumers * n * head_dim
    ring = 2 * stages * m * head_dim
    p_ds = consumers * n * m * (3 if config["SPLIT_DS"] else 2)
    dq_tiles = {"atomic": consumers, "combined": 1, "separate": 0}[config["DQ"]]
    dq = dq_tiles * m * head_dim * 4  # float32, for the TMA reduce-add
    return (held + ring + p_ds) * element_size + dq + BARRIER_BYTES


def config_problem(config: dict, head_dim: int) -> str | None:
    """Why the config cannot run at head_dim (a key missing or out of CHOICES, the head dim, a register split that
    shortchanges the first consumer, tiles over the shared memory), or None."""
    for key, choices in CHOICES.items():
        value = config.get(key)
        if value not in choices or isinstance(value, bool) != isinstance(choices[0], bool):
            return f"config[{key!r}] must be one of {choices}, got {value!r}"
    if head_dim not in HEAD_DIMS:
        return f"head dim {head_dim} is not one of {HEAD_DIMS}"
    consumers, registers = config["NUM_CONSUMERS"], config["CONSUMER_REGISTERS"]
    if config["DQ"] == "combined" and consumers != 2:
        return "DQ='combined' adds one consumer's dQ to the other's: it needs NUM_CONSUMERS=2"
    _, first = register_split(consumers, registers)
    if first != registers:
        fits = [r for r in CHOICES["CONSUMER_REGISTERS"] if register_split(consumers, r)[1] == r]
        return (
            f"CONSUMER_REGISTERS={registers} with {consumers} consumer(s) leaves the first consumer {first} "
            f"registers; choose one of {fits}"
        )
    used = shared_memory_bytes(config, head_dim)
    if used > SHARED_MEMORY_BYTES:
        return f"the tiles take {used} bytes of shared memory, over the {SHARED_MEMORY_BYTES} a program may use"
    return None
