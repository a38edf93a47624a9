"""matmul / linear (one GEMM with a fused bias and activation) and mlp (two GEMMs): tile shapes, the tile
order, pipelining, split-K, and the kernel variant: a program per tile ("tiled"), one program per SM
looping over tiles ("persistent"), and each of these with tensor-memory-accelerator descriptor loads
("tma", "tma_persistent") where the GPU and the installed Triton have them; on a Hopper GPU matmul and linear may
run the Gluon GEMM instead (engine="gluon": search_spaces/gemm_gluon.py).

A problem is a dict with the GEMM sizes `m`, `n`, `k`, the `batch` (0: a plain 2-D product) and, as the
search and the runtime hand it to the constraints, the `dtype`. Every constraint depends on the problem
only through the dtype and the sizes rounded up to powers of two, the numbers of its bucket: a config
that runs on one problem of a bucket runs on all of them (the Gluon engine's also read the layouts and bias a
problem of the gate names, which a call's problem at run time does not: the launcher checks those). The
estimates of shared memory and registers are coarse on purpose: they reject what cannot fit before anything
compiles; what is close still compiles, and a config that fails to is recorded as a compile error.
"""

from __future__ import annotations

import functools

from autotune.device_limits import Resources
from autotune.search_spaces import gemm_gluon as gluon
from autotune.search_spaces import hopper_gemm_config
from autotune.space import Config, Param, Problem, SearchSpace, next_pow2

VARIANTS = ("tiled", "persistent", "tma", "tma_persistent")
BLOCKS_MN = (16, 32, 64, 128, 256)
BLOCKS_K = (16, 32, 64, 128, 256)
GROUPS = (1, 4, 8, 16)
WARPS = (2, 4, 8)
STAGES = (1, 2, 3, 4, 5)
SPLITS = (1, 2, 4, 8, 16)
MIN_BLOCK = 16
"""tl.dot needs every dimension of its operands to be at least 16."""

ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2}
MIN_K_BYTES = 64
MAX_K_BYTES = 256
"""A row of an operand block spans 64 to 256 bytes along K: 32 to 128 elements of a half type (one 16-deep
tensor-core step is too little work per pipeline stage), 16 to 64 of float32 (whose products run on the
FMA units, each thread holding its slice of both operands in registers)."""
MIN_REUSE = 64
"""Blocks span at least this much of M and of N where the problem does: each operand element loaded is
used by that many products, and split-K, not small tiles, fills the GPU when tiles are few."""
MAX_ACC_REGISTERS = 128
"""float32 accumulator registers per thread on the tensor-core path (fp16, bf16): 128x256 tiles on 8
warps, the largest that leave room for addresses and the epilogue without spilling (255 per thread)."""
MAX_FMA_REGISTERS = 160
"""float32 (input_precision="ieee") products run on FMA units: the accumulator and each thread's slice of
both operand blocks live in registers."""
MIN_TILE_PER_WARP = 256
"""Accumulator elements per warp below which warps idle: a 16x16 tile per warp."""
SPLIT_FILL = 2
"""Split-K only while the programs it makes fit in this many waves of one program per SM."""
H100_SHARED_MEMORY = 232448
H100_SMS = 132
"""What the constraints assume without a GPU (the interpreter): the H100, the machine searches run on."""

DEFAULT: Config = {
    "variant": "tiled",
    "BLOCK_M": 64,
    "BLOCK_N": 64,
    "BLOCK_K": 32,
    "GROUP_M": 8,
    "num_warps": 4,
    "num_stages": 3,
    "SPLIT_K": 1,
    **gluon.TRITON,
}
"""The fallback: runs (and is right) on every problem, in every dtype, on every GPU."""


@functools.cache
def hardware() -> tuple[int, int]:
    """(shared memory one program may use, in bytes; SMs) of the GPU here, the H100's without one."""
    import torch

    from autotune import gpu

    if gpu.interpreter_active() or not torch.cuda.is_available():
        return H100_SHARED_MEMORY, H100_SMS
    props = torch.cuda.get_device_properties(gpu.device())
    smem = getattr(props, "shared_memory_per_block_optin", 0) or getattr(props, "shared_memory_per_block", 0)
    return int(smem) or H100_SHARED_MEMORY, props.multi_processor_count


@functools.cache
def tma_available() -> bool:
    """Tensor descriptors: the installed Triton has host-side ones, and the GPU has a TMA unit (Hopper and
    later); the interpreter emulates them."""
    try:
        from triton.tools import tensor_descriptor
    except ImportError:
        return False
    if not hasattr(tensor_descriptor, "TensorDescriptor"):
        return False
    import torch

    from autotune import gpu

    if gpu.interpreter_active() or not torch.cuda.is_available():
        return True
    return torch.cuda.get_device_capability(gpu.device()) >= (9, 0)


def _dims(p: Problem) -> tuple[int, int, int, int]:
    """The bucket's sizes: m, n, k rounded up to powers of two (16 at least: a block's floor), and the batch."""
    return (
        max(MIN_BLOCK, next_pow2(p["m"])),
        max(MIN_BLOCK, next_pow2(p["n"])),
        max(MIN_BLOCK, next_pow2(p["k"])),
        next_pow2(max(1, p.get("batch", 0))),
    )


def _itemsize(p: Problem) -> int:
    return ITEMSIZE[p.get("dtype", "fp32")]


def tiles(c: Config, p: Problem) -> int:
    """Output tiles of the bucket's largest problem: the programs of a grid without split-K."""
    m, n, _, batch = _dims(p)
    return -(-m // c["BLOCK_M"]) * -(-n // c["BLOCK_N"]) * batch


def _is_default(c: Config) -> bool:
    return c == DEFAULT


def _variant_available(c: Config, p: Problem) -> str | None:
    if c["variant"].startswith("tma") and not tma_available():
        return "tensor descriptors need a GPU with a TMA unit (Hopper or later) and a Triton that has them"
    return None


def k_range(p: Problem) -> tuple[int, int]:
    """The BLOCK_K values the problem's dtype allows, smallest and largest."""
    return MIN_K_BYTES // _itemsize(p), MAX_K_BYTES // _itemsize(p)


def _block_k_fits_dtype(c: Config, p: Problem) -> str | None:
    lo, hi = k_range(p)
    if not lo <= c["BLOCK_K"] <= hi and not _is_default(c):
        return (
            f"BLOCK_K * itemsize outside {MIN_K_BYTES}..{MAX_K_BYTES} bytes"
            f": BLOCK_K in {lo}..{hi} for {p.get('dtype', 'fp32')}"
        )
    return None


def shared_memory(c: Config, p: Problem) -> int:
    """Bytes of shared memory a program stages: an A and a B block per pipeline stage."""
    return (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * _itemsize(p) * c["num_stages"]


def resources(c: Config, p: Problem) -> Resources:
    """What a config needs of a device (a GPU served another GPU's rows checks it)."""
    if c.get("engine") == "gluon":
        used = hopper_gemm_config.shared_memory_bytes(gluon.kernel_config(c), gated=False, element_size=_itemsize(p))
        return Resources(shared_memory=used, tma=True)
    return Resources(shared_memory=shared_memory(c, p), tma=c["variant"].startswith("tma"))


def _fits_shared_memory(c: Config, p: Problem) -> str | None:
    smem = hardware()[0]
    if shared_memory(c, p) > smem:
        return f"num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * itemsize > {smem} bytes of shared memory"
    return None


def _fits_registers(c: Config, p: Problem) -> str | None:
    threads = 32 * c["num_warps"]
    acc = c["BLOCK_M"] * c["BLOCK_N"]
    if p.get("dtype", "fp32") == "fp32":
        per_thread = (acc + (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"]) / threads
        if per_thread > MAX_FMA_REGISTERS:
            return f"float32 accumulator and operand slices > {MAX_FMA_REGISTERS} registers per thread"
    elif acc / threads > MAX_ACC_REGISTERS:
        return f"BLOCK_M * BLOCK_N / threads > {MAX_ACC_REGISTERS} accumulator registers per thread"
    return None


def _no_idle_warps(c: Config, p: Problem) -> str | None:
    if c["BLOCK_M"] * c["BLOCK_N"] < MIN_TILE_PER_WARP * c["num_warps"]:
        return f"BLOCK_M * BLOCK_N < {MIN_TILE_PER_WARP} * num_warps: idle warps"
    return None


def _blocks_fit_problem(c: Config, p: Problem) -> str | None:
    if _is_default(c):
        return None  # runs everywhere: masked lanes on small problems, only slower
    m, n, k, _ = _dims(p)
    if c["BLOCK_M"] > m or c["BLOCK_N"] > n:
        return "a block larger than the problem rounded up to a power of two: only masked lanes"
    if c["BLOCK_M"] < min(m, MIN_REUSE) or c["BLOCK_N"] < min(n, MIN_REUSE):
        return f"a block under {MIN_REUSE} along M or N where the problem has {MIN_REUSE}: too little operand reuse"
    if c["BLOCK_K"] * c["SPLIT_K"] > max(k, k_range(p)[0]):
        return "BLOCK_K * SPLIT_K > K rounded up to a power of two: some splits would get no block of K"
    return None


def _group_has_rows(c: Config, p: Problem) -> str | None:
    if _is_default(c) or c["GROUP_M"] == 1:
        return None
    m, n, _, _ = _dims(p)
    if c["GROUP_M"] > -(-m // c["BLOCK_M"]):
        return "GROUP_M > the tiles along M: the same order as GROUP_M = that number"
    if n <= c["BLOCK_N"]:
        return "GROUP_M > 1 with one tile along N: the same order as GROUP_M = 1"
    return None


def _split_k_fills_the_gpu(c: Config, p: Problem) -> str | None:
    if c["SPLIT_K"] == 1:
        return None
    if c["variant"].endswith("persistent"):
        return "split-K is for the grid variants (tiled, tma): a persistent program owns whole tiles"
    sms = hardware()[1]
    if tiles(c, p) * c["SPLIT_K"] > SPLIT_FILL * sms:
        return f"split-K beyond {SPLIT_FILL} waves of programs: the tiles alone keep the {sms} SMs busy"
    return None


def _persistent_has_tiles_to_share(c: Config, p: Problem) -> str | None:
    sms = hardware()[1]
    if c["variant"].endswith("persistent") and tiles(c, p) <= sms:
        return f"persistent with at most {sms} tiles: one tile per program, the grid variant's work"
    return None


def _stages_have_loads(c: Config, p: Problem) -> str | None:
    if _is_default(c):
        return None
    k_blocks = -(-_dims(p)[2] // (c["BLOCK_K"] * c["SPLIT_K"]))
    if c["num_stages"] > 1 + k_blocks:
        return "num_stages > 1 + the blocks of K per program: buffers for loads that never happen"
    return None


def _choices(values: tuple[int, ...], lo: int, hi: int, default: int) -> list[int]:
    return sorted({v for v in values if lo <= v <= hi} | {default})


def _nearest(config: Config, name: str, values, p: Problem, checks) -> Config:
    """config with `name` moved to the value nearest the drawn one (the smaller on a tie) that passes
    `checks`; unchanged where none does (the constraints then reject it)."""
    drawn = config[name]
    order = sorted(values, key=lambda v: (abs(values.index(v) - values.index(drawn)), v)) if drawn in values else values
    for value in order:
        moved = {**config, name: value}
        if all(check(moved, p) is None for check in checks):
            return moved
    return config


_GRID_VARIANT = {"persistent": "tiled", "tma_persistent": "tma"}


def _block_choices(problem: Problem) -> dict[str, list[int]]:
    """The block sizes and GROUP_M values drawn for a problem (one distribution per name in a study: both engines
    draw from these)."""
    m, n, k, _ = _dims(problem)
    k_lo, k_hi = k_range(problem)
    return {
        "BLOCK_M": _choices(BLOCKS_MN, min(m, MIN_REUSE), m, DEFAULT["BLOCK_M"]),
        "BLOCK_N": _choices(BLOCKS_MN, min(n, MIN_REUSE), n, DEFAULT["BLOCK_N"]),
        "BLOCK_K": _choices(BLOCKS_K, k_lo, min(max(k, k_lo), k_hi), DEFAULT["BLOCK_K"]),
        "GROUP_M": list(GROUPS),
    }


def _suggest_engines(trial, problem: Problem) -> Config:
    """The engine drawn where the Gluon kernel runs on the problem, then that engine's config."""
    if gluon.runs_on(problem) and trial.suggest_categorical("engine", list(gluon.ENGINES)) == "gluon":
        return gluon.suggest(trial, _block_choices(problem), list(STAGES), gluon.MATMUL_FIXED, problem, gated=False)
    return _suggest(trial, problem)


def _suggest(trial, problem: Problem) -> Config:
    """Blocks drawn up to the bucket's sizes (and the default's, which every study starts from); GROUP_M
    only where there are tiles to group, SPLIT_K only for the grid variants. A draw that does not fit is
    repaired, not wasted: blocks shrink to the bucket's sizes, num_warps, num_stages, GROUP_M and SPLIT_K move
    to the nearest value that fits the drawn tile, and a persistent variant with too few tiles to share
    becomes its grid counterpart. The trial keeps the drawn values, the config the repaired ones."""
    m, n, k, _ = _dims(problem)
    k_lo = k_range(problem)[0]
    blocks = _block_choices(problem)
    config = {
        **gluon.TRITON,
        "variant": trial.suggest_categorical(
            "variant", [v for v in VARIANTS if not v.startswith("tma") or tma_available()]
        ),
        **{name: trial.suggest_categorical(name, blocks[name]) for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K")},
        "num_warps": trial.suggest_categorical("num_warps", list(WARPS)),
        "num_stages": trial.suggest_categorical("num_stages", list(STAGES)),
    }
    # Where GROUP_M is not drawn, the default's draw keeps the default's (it runs everywhere, unrepaired).
    core_is_default = all(DEFAULT[name] == value for name, value in config.items())
    config["GROUP_M"] = DEFAULT["GROUP_M"] if core_is_default else 1
    config["SPLIT_K"] = 1
    if m > config["BLOCK_M"] and n > config["BLOCK_N"]:
        config["GROUP_M"] = trial.suggest_categorical("GROUP_M", blocks["GROUP_M"])
    if not config["variant"].endswith("persistent") and tiles(config, problem) * 2 <= SPLIT_FILL * hardware()[1]:
        config["SPLIT_K"] = trial.suggest_categorical("SPLIT_K", _choices(SPLITS, 1, max(k, k_lo) // k_lo, 1))
    if _is_default(config):
        return config
    config["BLOCK_M"], config["BLOCK_N"] = min(config["BLOCK_M"], m), min(config["BLOCK_N"], n)
    if _persistent_has_tiles_to_share(config, problem):
        config["variant"] = _GRID_VARIANT[config["variant"]]
    config = _nearest(config, "num_warps", WARPS, problem, (_fits_registers, _no_idle_warps))
    config = _nearest(config, "GROUP_M", GROUPS, problem, (_group_has_rows,))
    config = _nearest(config, "SPLIT_K", SPLITS, problem, (_split_k_fills_the_gpu, _blocks_fit_problem))
    return _nearest(config, "num_stages", STAGES, problem, (_fits_shared_memory, _stages_have_loads))


SPACE = SearchSpace(
    params=(
        Param("variant", VARIANTS),
        Param("BLOCK_M", BLOCKS_MN),
        Param("BLOCK_N", BLOCKS_MN),
        Param("BLOCK_K", BLOCKS_K),
        Param("GROUP_M", GROUPS),
        Param("num_warps", WARPS),
        Param("num_stages", STAGES),
        Param("SPLIT_K", SPLITS),
        *gluon.PARAMS,  # since the Gluon engine: matmul's and linear's specs `extend` the space without them
    ),
    default=DEFAULT,
    constraints=(
        gluon.engine_fixes_the_others(gluon.MATMUL_FIXED),
        gluon.where_it_runs(gated=False),
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
                _split_k_fills_the_gpu,
                _persistent_has_tiles_to_share,
                _stages_have_loads,
            ),
        ),
    ),
    suggest_fn=_suggest_engines,
    starts_fn=lambda p: gluon.starts(p, gluon.MATMUL_FIXED, gated=False),
)


def bucket(problem: Problem) -> str:
    """m, n, k and the batch, each rounded up to a power of two."""
    return (
        f"m={next_pow2(problem['m'])},n={next_pow2(problem['n'])},k={next_pow2(problem['k'])},"
        f"b={next_pow2(max(1, problem.get('batch', 0)))}"
    )
