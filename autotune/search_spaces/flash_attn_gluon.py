"""flash_attn's Gluon engine: the forward's configs with engine="gluon" run the Hopper forward written in Gluon
(autotune/kernels/attention/hopper_forward.py: FlashAttention-3's warp-specialized TMA + wgmma pipeline) instead of
the Triton kernels. They reuse BLOCK_M (one consumer warpgroup's query rows), BLOCK_N and num_stages (the K/V
ring's depth), add NUM_CONSUMERS, PINGPONG and CONSUMER_REGISTERS, and fix the Triton-only parameters to one value
each; Triton configs fix the Gluon-only ones to the values every config stored before them meant (`TRITON`), so
neither engine multiplies the other's space.

The Gluon engine runs only where its kernel can: Triton's Gluon for Hopper importable, a Hopper GPU (sm_90), not
the interpreter (nor a search without a GPU), half inputs, head dims 64 and 128, no key split: elsewhere the
constraints reject it, and a search there tries the Triton kernels alone.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import triton

from autotune import gpu
from autotune.space import Config, Param, Problem, next_pow2

GLUON_TRITON = "3.6."
"""The Triton release whose Gluon API the kernel is written against (warp_specialize's signature, the wgmma and
TMA builtins): other releases are refused, not guessed at."""
HEAD_DIMS = (64, 128)
HALF = ("bf16", "fp16")
SHARED_MEMORY_BYTES = 227 * 1024
"""Shared memory one H100 program may opt into."""
BARRIER_BYTES = 1024
"""Shared memory kept for the mbarriers and alignment, beyond the tiles."""
ONE_CONSUMER_MAX_BLOCK_N = 128
"""The widest key block one consumer compiles with (`config_problem`)."""
LOADER_REGISTERS = 24
"""Registers a thread of the TMA warp keeps (the least setmaxnreg allows); the consumers get the rest."""
CHOICES = {
    "BLOCK_M": (64, 128),
    "BLOCK_N": (64, 128, 256),
    "NUM_STAGES": (1, 2, 3, 4),
    "NUM_CONSUMERS": (1, 2),
    "PINGPONG": (False, True),
    "CONSUMER_REGISTERS": (192, 200, 216, 232, 240),
}
"""What each key of the kernel's own config may be (BLOCK_M counts one consumer warpgroup's query rows)."""

ENGINES = ("triton", "gluon")
PARAMS = (
    Param("engine", ENGINES),
    Param("NUM_CONSUMERS", (1, 2)),
    Param("PINGPONG", (False, True)),
    Param("CONSUMER_REGISTERS", (232, 240)),
)
"""The forward space's parameters since the Gluon engine."""
CONSUMER_REGISTERS = {1: 232, 2: 240}
"""The registers a consumer asks for, by their count: the most that leave the first consumer as many
(`register_split`)."""
TRITON: Config = {"engine": "triton", "NUM_CONSUMERS": 1, "PINGPONG": False, "CONSUMER_REGISTERS": 232}
"""The Gluon-only parameters of every Triton config: what the configs stored before the engine existed meant."""
GLUON_FIXED: Config = {"num_warps": 4, "mask": "edges", "kv_load": "pointer", "KV_SPLITS": 1, "gqa": "per_head",
                       "p": "rounded", "combine": "kernel"}  # fmt: skip
"""The Triton-only parameters of every Gluon config (its masks, TMA loads, one program a head, P rounded are its own;
num_warps=4 is its warpgroup; no key splits to merge)."""
STARTS = ((64, 128, 2, 2, True, 240), (64, 128, 3, 2, False, 240))
"""(BLOCK_M, BLOCK_N, num_stages, NUM_CONSUMERS, PINGPONG, CONSUMER_REGISTERS) that were fastest of
benchmarks/hopper_attention_probe.py's grid on an H100 (every one of its 8 passed its checks there)."""


def register_split(num_consumers: int, consumer_registers: int) -> tuple[int, int]:
    """(maxnreg to launch with, registers the first consumer gets) when the other consumer asks for
    consumer_registers and the loader for LOADER_REGISTERS: Triton 3.6 hands the default partition (the first
    consumer) what is left of maxnreg times the warpgroups (the loader's warp is padded to one), rounded
    down to 8, as its AllocateWarpGroups pass computes it."""
    groups = num_consumers + 1
    maxnreg = (num_consumers * consumer_registers + LOADER_REGISTERS) // groups // 8 * 8
    left = maxnreg * groups - (num_consumers - 1) * consumer_registers - LOADER_REGISTERS
    return maxnreg, left // 8 * 8


def register_split_problem(num_consumers: int, consumer_registers: int, choices) -> str | None:
    """Why CONSUMER_REGISTERS=consumer_registers shortchanges the first consumer (`register_split` gives it fewer),
    naming those of `choices` that do not; or None."""
    _, first = register_split(num_consumers, consumer_registers)
    if first == consumer_registers:
        return None
    fits = [r for r in choices if register_split(num_consumers, r)[1] == r]
    return (
        f"CONSUMER_REGISTERS={consumer_registers} with {num_consumers} consumer(s) leaves the first consumer {first} "
        f"registers; choose one of {fits}"
    )


def shared_memory_bytes(config: dict, head_dim: int, element_size: int = 2) -> int:
    """Shared memory one program takes: a Q tile per consumer (reused for its output), the K/V ring, barriers."""
    q = config["NUM_CONSUMERS"] * config["BLOCK_M"] * head_dim
    kv = 2 * config["NUM_STAGES"] * config["BLOCK_N"] * head_dim
    return (q + kv) * element_size + BARRIER_BYTES


def config_problem(config: dict, head_dim: int) -> str | None:
    """Why the kernel's config cannot run at head_dim (a key missing or out of CHOICES, a register split that
    shortchanges the first consumer, tiles over the shared memory), or None."""
    for key, choices in CHOICES.items():
        if config.get(key) not in choices:
            return f"config[{key!r}] must be one of {choices}, got {config.get(key)!r}"
    consumers = config["NUM_CONSUMERS"]
    if config["PINGPONG"] and consumers != 2:
        return "PINGPONG takes turns between two consumers: it needs NUM_CONSUMERS=2"
    why = register_split_problem(consumers, config["CONSUMER_REGISTERS"], CHOICES["CONSUMER_REGISTERS"])
    if why is not None:
        return why
    if consumers == 1 and config["BLOCK_N"] > ONE_CONSUMER_MAX_BLOCK_N:
        # ptxas refuses it (C7602) at head dims 64 and 128: a 64 x 256 float32 S tile is 128 registers a thread on its
        # own, and the launch gives 128 (register_split), of which the wgmma needs 154.
        return (
            f"BLOCK_N={config['BLOCK_N']} with one consumer: its S tile needs more registers than the "
            f"{register_split(1, config['CONSUMER_REGISTERS'])[0]} a thread is launched with"
        )
    used = shared_memory_bytes(config, head_dim)
    if used > SHARED_MEMORY_BYTES:
        return f"the tiles take {used} bytes of shared memory, over the {SHARED_MEMORY_BYTES} a program may use"
    return None


def is_triton(c: Config) -> bool:
    """Whether a forward config runs the Triton engine (every call that its space admits can run it)."""
    return c.get("engine", "triton") == "triton"


def kernel_config(c: Config) -> dict:
    """The Gluon kernel's own config (hopper_forward.launch's) of a forward config with engine="gluon"."""
    return {
        "BLOCK_M": c["BLOCK_M"],
        "BLOCK_N": c["BLOCK_N"],
        "NUM_STAGES": c["num_stages"],
        **{k: c[k] for k in ("NUM_CONSUMERS", "PINGPONG", "CONSUMER_REGISTERS")},
    }


@functools.cache
def unavailable() -> str | None:
    """Why the Gluon kernel cannot run on this machine (no Gluon for Hopper, the interpreter, no GPU, not sm_90,
    another Triton), or None where it can."""
    if gpu.interpreter_active():
        return "the Triton interpreter does not run Gluon"
    cc = gpu.current_gpu().compute_capability
    if cc is None:
        return "no GPU: the Gluon kernel needs a Hopper GPU (sm_90)"
    if cc != (9, 0):
        return f"the Gluon kernel needs a Hopper GPU (sm_90), this is sm_{cc[0]}{cc[1]}"
    if not triton.__version__.startswith(GLUON_TRITON):
        return f"written against Triton {GLUON_TRITON}x's Gluon API, found Triton {triton.__version__}"
    try:
        importlib.import_module("triton.experimental.gluon.language.nvidia.hopper")
    except ImportError as error:
        return f"Triton {triton.__version__} has no Gluon for Hopper ({error})"
    return None


def problem_refuses(p: Problem) -> str | None:
    """Why no Gluon config can take problem p (its dtype, its head dim), or None."""
    if p.get("dtype", "bf16") not in HALF:
        return f"it takes {' and '.join(HALF)} inputs, not {p['dtype']}"
    if p["head_dim"] not in HEAD_DIMS:
        return f"head dim {p['head_dim']} is not one of {HEAD_DIMS}"
    return None


def runs_on(p: Problem) -> bool:
    """Whether the Gluon engine can run problem p on this machine (some config of it)."""
    return unavailable() is None and problem_refuses(p) is None


def fixed_by_engine(c: Config, triton: Config, gluon: Config) -> str | None:
    """Why c sets a parameter its engine fixes (`gluon` the Gluon engine's values of the Triton-only parameters,
    `triton` the Triton engine's of the Gluon-only ones) to another value, or None."""
    fixed = gluon if c["engine"] == "gluon" else triton
    other = {k: v for k, v in fixed.items() if c[k] != v or isinstance(c[k], bool) != isinstance(v, bool)}
    if other:
        return f"engine={c['engine']} fixes {', '.join(f'{k}={v}' for k, v in fixed.items() if k in other)}"
    return None


def engine_fixes_the_others(c: Config, p: Problem) -> str | None:
    """Each engine's configs set the other engine's parameters to one value each."""
    return fixed_by_engine(c, TRITON, GLUON_FIXED)


def gluon_where_it_runs(c: Config, p: Problem) -> str | None:
    """engine=gluon only where the Gluon kernel runs: this machine, the problem's dtype and head dim, its config."""
    if c["engine"] != "gluon":
        return None
    here = unavailable() if gpu.machine_matters() else None  # a stored row is judged as on its own GPU
    reason = here or problem_refuses(p) or config_problem(kernel_config(c), p["head_dim"])
    if reason is None and c["BLOCK_M"] * c["NUM_CONSUMERS"] > max(64, next_pow2(p["nq"])):
        reason = "BLOCK_M x NUM_CONSUMERS exceeds the queries rounded up to a power of two: only masked rows"
    if reason is None and c["BLOCK_N"] > max(64, next_pow2(p["nk"])):
        reason = "BLOCK_N exceeds Nk rounded up to a power of two: only masked keys"
    return None if reason is None else f"engine=gluon: {reason}"


def triton_only(constraint: Callable[[Config, Problem], str | None]) -> Callable[[Config, Problem], str | None]:
    """constraint, applied to the Triton engine's configs only (it judges what the Triton kernels need)."""

    @functools.wraps(constraint)
    def check(c: Config, p: Problem) -> str | None:
        return None if c["engine"] == "gluon" else constraint(c, p)

    return check


def suggest(trial, draw, choices: dict[str, list], stages: list) -> Config:
    """A Gluon config drawn from an Optuna trial: tiles and stages from the Triton engine's choices (one
    distribution per name in a study; the constraints reject what the kernel cannot take), its consumers (ping-pong
    drawn only for two; the registers each count of them takes)."""
    count = draw("NUM_CONSUMERS", [1, 2])
    consumers = {
        "NUM_CONSUMERS": count,
        "PINGPONG": count == 2 and draw("PINGPONG", [False, True]),
        "CONSUMER_REGISTERS": CONSUMER_REGISTERS[count],
    }
    return {
        **GLUON_FIXED,
        "BLOCK_M": draw("BLOCK_M", choices["BLOCK_M"]),
        "BLOCK_N": draw("BLOCK_N", choices["BLOCK_N"]),
        "num_stages": draw("num_stages", stages),
        "engine": "gluon",
        **consumers,
    }


def starts(p: Problem) -> list[Config]:
    """The probe's fastest Gluon configs, where the engine runs on p."""
    if not runs_on(p):
        return []
    keys = ("BLOCK_M", "BLOCK_N", "num_stages", "NUM_CONSUMERS", "PINGPONG", "CONSUMER_REGISTERS")
    return [{**GLUON_FIXED, "engine": "gluon", **dict(zip(keys, start))} for start in STARTS]
