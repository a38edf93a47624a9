"""flash_attn: the forward tiles queries by BLOCK_M and streams keys by BLOCK_N; variants mask only the
blocks an edge crosses or every block, load K/V through pointers or tensor descriptors (TMA on Hopper),
split the key range over KV_SPLITS programs (decode; merged by a second kernel, or by the split program that
finishes a tile last), pack a GQA group's query heads into one tile, and
round P to the input dtype for P @ V (FlashAttention's way) or split it into two half operands; on a Hopper
GPU the forward may run the Gluon kernel instead (engine="gluon": search_spaces/flash_attn_gluon.py).
The backward holds BLOCK_N keys and streams BLOCK_M queries (dk, dv), and gets dq from a query-side kernel
(roles swapped: BLOCK_N queries held, BLOCK_M keys streamed) or from atomics; delta = rowsum(P * dP) comes
from the output (rowsum(dO * O), float32 inputs only: rounded to a half dtype, the output's delta errs where a
row's cancellation leaves dQ small) or is recomputed by the query-side kernel; on a Hopper GPU the backward may run
the Gluon kernels instead (engine="gluon": search_spaces/flash_attn_backward_gluon.py).

Every constraint depends on the problem only through its bucket's numbers (next_pow2 of B*Hq, Nq and Nk,
the group size, the head dim, causal): a config that runs on one problem of a bucket runs on all of them.
"""

from __future__ import annotations

import functools

import triton.language as tl

from autotune import gpu
from autotune.device_limits import Resources
from autotune.search_spaces import flash_attn_backward_gluon as backward_gluon
from autotune.search_spaces import flash_attn_gluon as gluon
from autotune.space import Config, Param, Problem, SearchSpace, next_pow2, powers_of_two

MAX_HEAD_DIM = 256
BLOCKS = powers_of_two(16, 256)
BACKWARD_BLOCKS = powers_of_two(16, 128)
WARPS = (2, 4, 8)
STAGES = (1, 2, 3, 4, 5)
KV_SPLITS = (1, 2, 4, 8, 16, 32, 64, 128)
COMBINES = ("kernel", "last_split")
"""How key splits merge: a second kernel launched after them, or the split program that finishes a tile last."""
MERGE_MAX_SPLITS = 32
"""The most key splits combine="last_split" merges: its merge is unrolled over them (code that grows with each);
on the H100 32 splits already merged slower than 16 (docs/kernels.md)."""
MAX_TILE_REGISTERS = 256
"""32-bit values per thread a program's tiles may take (estimated); past this the compiler spills."""
SHARED_MEMORY_BYTES = 227 * 1024
"""Shared memory a program may use on Hopper (the H100's opt-in limit), also assumed without a GPU."""
SHARED_MEMORY_RESERVED = 1024
"""Of it, kept for what is not a tile: pipeline barriers and the like (a 3-stage forward with descriptor
loads took 32 bytes more than its tiles in float32)."""
SPLIT_MAX_PROGRAMS = 512
"""Split the key range only when the unsplit grid has fewer programs than this: a full grid gains
nothing from more, smaller programs and pays for the combine."""
HALF_BYTES = 2
"""Bytes per tile element for 16-bit inputs (and for problems that do not say their dtype)."""


def _tile_bytes(p: Problem, *, computed: bool = False) -> int:
    """Bytes per element of the tiles a program stages in shared memory: the input's size, or with
    `computed` the compute dtype's (float32 inputs compute in float64, 8 bytes). Checked against the shared
    memory Triton 3.6 allocates for sm_90 (tests/hopper_compile.py's compiler, pointer loads): the forward's
    float32 tiles take at most 4 bytes an element, the backward's up to 8 (its float64 operands)."""
    if p.get("dtype") == "fp32":
        return 8 if computed else 4
    return HALF_BYTES


def _registers_per_value(p: Problem) -> int:
    """32-bit registers one tile value takes: two for float32 inputs, which compute in float64."""
    return 2 if p.get("dtype") == "fp32" else 1


FORWARD_DEFAULT: Config = {
    "BLOCK_M": 16,
    "BLOCK_N": 32,
    "num_warps": 2,
    "num_stages": 1,
    "mask": "edges",
    "kv_load": "pointer",
    "KV_SPLITS": 1,
    "gqa": "per_head",
    "p": "split",
    **gluon.TRITON,
    "combine": "kernel",
}
"""The forward fallback: small tiles, not pipelined, that fit every head dim and dtype (float32 inputs
compute in float64: at head dim 256 their tiles take 8 KB a row), and P split in two half operands of
P @ V, which keeps the output right where it is a long average of values that cancel (decode)."""
BACKWARD_DEFAULT: Config = {
    "BLOCK_M": 16,
    "BLOCK_N": 16,
    "num_warps": 2,
    "num_stages": 1,
    "dq": "separate",
    "delta": "recomputed",
    "ds": "split",
    "dv": "rounded",
    **backward_gluon.TRITON,
}
"""The backward fallback: the smallest tiles (it holds four of them, and float32 inputs compute in
float64), delta recomputed, which is right also where softmax rows saturate, and dS split in two half
operands, which keeps dQ (dK) right where one query sees many keys (one key many queries). dV from the engine's own
pass, P rounded (what every row meant before the dV pass existed)."""


def dims(problem: Problem) -> tuple[int, int, int, int, int, int, int, bool]:
    """(batch, heads, kv_heads, nq, nk, head_dim, group, causal) of a problem."""
    heads, kv_heads = problem["heads"], problem["kv_heads"]
    return (
        problem["batch"],
        heads,
        kv_heads,
        problem["nq"],
        problem["nk"],
        problem["head_dim"],
        max(1, heads // max(1, kv_heads)),
        bool(problem["causal"]),
    )


def block_d(head_dim: int) -> int:
    """The head dim padded to a power of two (masked lanes), at least 16: tl.dot's smallest K."""
    return max(16, next_pow2(head_dim))


def bucket(problem: Problem) -> str:
    """B*Hq, Nq and Nk rounded up to powers of two; the group size, head dim and causal flag as they are."""
    b, h, _, nq, nk, d, group, causal = dims(problem)
    return f"bh={next_pow2(b * h)},g={group},nq={next_pow2(nq)},nk={next_pow2(nk)},d={d},causal={int(causal)}"


@functools.cache
def descriptors_supported() -> bool:
    """Whether K/V can load through tensor descriptors here: Triton has them and, on a GPU, it is a Hopper
    or newer (TMA); the interpreter runs them too."""
    if not hasattr(tl, "make_tensor_descriptor"):
        return False
    cc = gpu.current_gpu().compute_capability
    return cc is None or cc >= (9, 0)


def _rows(c: Config, p: Problem) -> int:
    """Tile rows a program's queries take, bucketed: Nq, times the group when its heads are packed."""
    _, _, _, nq, _, _, group, _ = dims(p)
    return next_pow2(nq) * (group if c.get("gqa") == "packed" else 1)


def _is_default(c: Config) -> bool:
    return c == FORWARD_DEFAULT or c == BACKWARD_DEFAULT


def _blocks_fit_problem(c: Config, p: Problem) -> str | None:
    if _is_default(c):
        return None  # runs everywhere, with masked rows and keys where the problem is small
    if c["BLOCK_M"] > max(16, _rows(c, p)):
        return "BLOCK_M exceeds the query rows rounded up to a power of two: only masked rows"
    if c["BLOCK_N"] > max(16, next_pow2(dims(p)[4])):
        return "BLOCK_N exceeds Nk rounded up to a power of two: only masked keys"
    return None


def forward_shared_memory(c: Config, p: Problem) -> int:
    """Bytes of tiles a forward program stages: K and V tiles, one per pipeline stage, and the query tile as
    an MMA operand (SHARED_MEMORY_RESERVED not included)."""
    return _tile_bytes(p) * block_d(dims(p)[5]) * (c["BLOCK_M"] + 2 * c["BLOCK_N"] * c["num_stages"])


def forward_resources(c: Config, p: Problem) -> Resources:
    """What a forward config needs of a device (a GPU served another GPU's rows checks it)."""
    if c.get("engine") == "gluon":
        used = gluon.shared_memory_bytes(gluon.kernel_config(c), dims(p)[5])
        return Resources(shared_memory=used, tma=True)
    return Resources(
        shared_memory=forward_shared_memory(c, p) + SHARED_MEMORY_RESERVED, tma=c["kv_load"] == "descriptor"
    )


def _forward_fits_shared_memory(c: Config, p: Problem) -> str | None:
    need = forward_shared_memory(c, p)
    if need + SHARED_MEMORY_RESERVED > SHARED_MEMORY_BYTES:
        return (
            f"K/V tiles over {c['num_stages']} stages need {need} "
            f"bytes of shared memory > {SHARED_MEMORY_BYTES - SHARED_MEMORY_RESERVED}"
        )
    return None


def _forward_fits_registers(c: Config, p: Problem) -> str | None:
    if _is_default(c):
        return None  # the fallback: it may spill, it runs everywhere (float32 at head dim 256 too)
    # Per thread: the output accumulator and the query (BLOCK_M x BLOCK_D), the scores (BLOCK_M x BLOCK_N).
    d = block_d(dims(p)[5])
    if c["BLOCK_M"] * (d + c["BLOCK_N"]) * _registers_per_value(p) > MAX_TILE_REGISTERS * 32 * c["num_warps"]:
        return f"BLOCK_M x (head dim + BLOCK_N) > {MAX_TILE_REGISTERS} values per thread"
    return None


def _no_idle_warps(c: Config, p: Problem) -> str | None:
    # A warp's smallest MMA tile is 16 x 16: a score tile smaller than that per warp leaves warps idle.
    if not _is_default(c) and c["BLOCK_M"] * c["BLOCK_N"] < 256 * c["num_warps"]:
        return "BLOCK_M x BLOCK_N < 256 x num_warps: idle warps"
    return None


def _split_only_where_programs_are_few(c: Config, p: Problem) -> str | None:
    if c["KV_SPLITS"] == 1:
        return None
    b, h, hk, _, nk, _, _, _ = dims(p)
    heads = hk if c["gqa"] == "packed" else h
    programs = -(-_rows(c, p) // c["BLOCK_M"]) * next_pow2(b * heads)
    if programs >= SPLIT_MAX_PROGRAMS:
        return f"KV_SPLITS > 1 with {programs} programs already (>= {SPLIT_MAX_PROGRAMS})"
    if c["KV_SPLITS"] * c["BLOCK_N"] > next_pow2(nk):
        return "KV_SPLITS x BLOCK_N exceeds Nk rounded up to a power of two: splits without a key block"
    return None


def _merge_only_splits(c: Config, p: Problem) -> str | None:
    if c["combine"] == "last_split" and c["KV_SPLITS"] == 1:
        return "combine=last_split merges key splits: it needs KV_SPLITS > 1"
    if c["combine"] == "last_split" and c["KV_SPLITS"] > MERGE_MAX_SPLITS:
        return f"combine=last_split unrolls its merge over the splits: KV_SPLITS at most {MERGE_MAX_SPLITS}"
    return None


def _pack_only_grouped_heads(c: Config, p: Problem) -> str | None:
    if c["gqa"] == "packed" and dims(p)[6] == 1:
        return "gqa=packed needs grouped-query attention (more query heads than key/value heads)"
    return None


def _descriptors_where_supported(c: Config, p: Problem) -> str | None:
    if c["kv_load"] == "descriptor" and not descriptors_supported():
        return "kv_load=descriptor needs tl.make_tensor_descriptor and a Hopper or newer GPU"
    return None


def _stages_need_a_loop(c: Config, p: Problem) -> str | None:
    if _is_default(c) or c["num_stages"] == 1:
        return None
    if next_pow2(dims(p)[4]) <= c["BLOCK_N"] * c.get("KV_SPLITS", 1):
        return "one key block per program: nothing to pipeline, num_stages must be 1"
    return None


def _forward_choices(problem: Problem) -> dict[str, list]:
    """The values worth drawing for a problem, fixed per problem (Optuna's categorical choices cannot
    change within a study); the constraints reject the combinations that still cannot run."""
    b, h, hk, nq, nk, _, group, _ = dims(problem)
    rows = next_pow2(nq) * group
    block_m = [m for m in BLOCKS if m <= max(16, rows)]
    splits = [s for s in KV_SPLITS if s * 16 <= next_pow2(nk)]
    fewest_programs = -(-rows // block_m[-1]) * next_pow2(b * hk)
    return {
        "BLOCK_M": block_m,
        "BLOCK_N": [n for n in BLOCKS if n <= max(16, next_pow2(nk))],
        "gqa": ["per_head", "packed"] if group > 1 else ["per_head"],
        "KV_SPLITS": splits if fewest_programs < SPLIT_MAX_PROGRAMS else [1],
        "kv_load": ["pointer", "descriptor"] if descriptors_supported() else ["pointer"],
        "engine": list(gluon.ENGINES) if gluon.runs_on(problem) else ["triton"],
    }


FORWARD_START_TILES = {64: ((64, 128, 4, 2), (128, 64, 4, 3)), 128: ((128, 64, 4, 2),)}
"""(BLOCK_M, BLOCK_N, num_warps, num_stages) that were best on the H100 across the half-precision prefill presets, by
head dim (up to 64, up to 128): docs/kernels.md (attention). The head dim 64 rows
searched without them had settled 6-20% slower."""


def _forward_starts(p: Problem) -> list[Config]:
    """The start tiles for a half-precision problem's head dim, with K/V through descriptors, masks on edge blocks,
    P rounded, no key split, heads one per program; none for float32 (computed in float64: other tiles fit); then
    the Gluon engine's, where it runs."""
    if p.get("dtype") == "fp32":
        return []
    d = dims(p)[5]
    tiles = next((t for limit, t in sorted(FORWARD_START_TILES.items()) if d <= limit), ())
    return [
        {
            "BLOCK_M": m,
            "BLOCK_N": n,
            "num_warps": w,
            "num_stages": st,
            "mask": "edges",
            "kv_load": "descriptor",
            "KV_SPLITS": 1,
            "gqa": "per_head",
            "p": "rounded",
            **gluon.TRITON,
            "combine": "kernel",
        }
        for m, n, w, st in tiles
    ] + gluon.starts(p)


def _suggest_forward(trial, problem: Problem) -> Config:
    choices = _forward_choices(problem)

    def draw(name: str, values: list):
        return trial.suggest_categorical(name, values) if len(values) > 1 else values[0]

    if draw("engine", choices["engine"]) == "gluon":
        return gluon.suggest(trial, draw, choices, list(STAGES))
    config = {
        **gluon.TRITON,
        "BLOCK_M": draw("BLOCK_M", choices["BLOCK_M"]),
        "BLOCK_N": draw("BLOCK_N", choices["BLOCK_N"]),
        "num_warps": draw("num_warps", list(WARPS)),
        "num_stages": draw("num_stages", list(STAGES)),
        "mask": draw("mask", ["edges", "every"]),
        "kv_load": draw("kv_load", choices["kv_load"]),
        "KV_SPLITS": draw("KV_SPLITS", choices["KV_SPLITS"]),
        "gqa": draw("gqa", choices["gqa"]),
        "p": draw("p", ["rounded", "split"]),
    }
    return {**config, "combine": draw("combine", list(COMBINES)) if config["KV_SPLITS"] > 1 else "kernel"}


FORWARD_SPACE = SearchSpace(
    params=(
        Param("BLOCK_M", BLOCKS),
        Param("BLOCK_N", BLOCKS),
        Param("num_warps", WARPS),
        Param("num_stages", STAGES),
        Param("mask", ("edges", "every")),
        Param("kv_load", ("pointer", "descriptor")),
        Param("KV_SPLITS", KV_SPLITS),
        Param("gqa", ("per_head", "packed")),
        Param("p", ("rounded", "split")),
        *gluon.PARAMS,  # since the Gluon engine: the kernel's SPEC `extends` the space without them
        Param("combine", COMBINES),  # since the merge in the forward's launch: likewise
    ),
    default=FORWARD_DEFAULT,
    constraints=(
        gluon.engine_fixes_the_others,
        gluon.gluon_where_it_runs,
        _merge_only_splits,
        *map(
            gluon.triton_only,
            (
                _descriptors_where_supported,
                _pack_only_grouped_heads,
                _blocks_fit_problem,
                _forward_fits_shared_memory,
                _forward_fits_registers,
                _no_idle_warps,
                _split_only_where_programs_are_few,
                _stages_need_a_loop,
            ),
        ),
    ),
    suggest_fn=_suggest_forward,
    starts_fn=_forward_starts,
)


def _backward_blocks_fit_problem(c: Config, p: Problem) -> str | None:
    if _is_default(c):
        return None
    _, _, _, nq, nk, _, _, _ = dims(p)
    # The dk/dv kernel holds BLOCK_N keys; the dq kernel holds BLOCK_N queries and streams BLOCK_M keys.
    if c["BLOCK_N"] > max(16, next_pow2(max(nq, nk))):
        return "BLOCK_N exceeds Nq and Nk rounded up to a power of two: only masked rows"
    if c["BLOCK_M"] > max(16, next_pow2(max(nq, nk))):
        return "BLOCK_M exceeds Nq and Nk rounded up to a power of two: only masked rows"
    return None


def _backward_fits_registers(c: Config, p: Problem) -> str | None:
    if _is_default(c):
        return None  # the fallback: it may spill, it runs everywhere (float32 at head dim 256 too)
    # Held: K, V and the float32 dK, dV accumulators (BLOCK_N x BLOCK_D each); per step the transposed
    # scores, probabilities and their gradients (BLOCK_N x BLOCK_M).
    d = block_d(dims(p)[5])
    if c["BLOCK_N"] * (3 * d + 2 * c["BLOCK_M"]) * _registers_per_value(p) > MAX_TILE_REGISTERS * 32 * c["num_warps"]:
        return f"BLOCK_N x (3 head dims + 2 BLOCK_M) > {MAX_TILE_REGISTERS} values per thread"
    return None


def backward_shared_memory(c: Config, p: Problem) -> int:
    """Bytes of tiles a backward program stages: Q and dO tiles per stage, K and V as MMA operands
    (SHARED_MEMORY_RESERVED not included)."""
    d = block_d(dims(p)[5])
    return _tile_bytes(p, computed=True) * d * (2 * c["BLOCK_M"] * c["num_stages"] + 2 * c["BLOCK_N"])


def backward_resources(c: Config, p: Problem) -> Resources:
    """What a backward config needs of a device (a GPU served another GPU's rows checks it)."""
    if c.get("engine") == "gluon":
        used = backward_gluon.shared_memory_bytes(backward_gluon.kernel_config(c), dims(p)[5])
        return Resources(shared_memory=used, tma=True)
    return Resources(shared_memory=backward_shared_memory(c, p) + SHARED_MEMORY_RESERVED)


def _backward_fits_shared_memory(c: Config, p: Problem) -> str | None:
    need = backward_shared_memory(c, p)
    if need + SHARED_MEMORY_RESERVED > SHARED_MEMORY_BYTES:
        return (
            f"Q/dO tiles over {c['num_stages']} stages need {need} "
            f"bytes of shared memory > {SHARED_MEMORY_BYTES - SHARED_MEMORY_RESERVED}"
        )
    return None


OUTPUT_DELTA_FAILED = (
    "delta = rowsum(dO * O) of the output rounded to the inputs' dtype errs where a row's cancellation leaves dQ"
    " small: the Gluon backward's dQ failed `db verify` on an H200 (2026-11-28: causal, Nq 2, Nk 187, head dim 64,"
    " magnitude 0.01, seed 85904523: error 0.225 over a budget of 0.0285, PyTorch's 0.00518), and the Triton"
    " kernels with delta='output' fail there alike (0.225; 0.00347 recomputed)"
)
"""Why delta="output" is refused for half inputs, either engine: the failure is the arithmetic's, not a kernel's,
and a search's draws meet it by chance (one seed in three on that problem)."""


DV_SPLIT_NEEDED = (
    "P rounded to fp16 for dV = P^T dO errs where dV's terms cancel: on the H200 (2026-11-28) every backward config"
    " failed `db verify` at 1x16x16384x128 (dV 0.0337 over a budget of 0.0241 at batch 3, 8 query heads on 2 key"
    " heads, Nq 3, Nk 1506, head dim 64, inputs x 3, seed 6003448; the Triton kernels alike on the CPU); P split"
    " into two half operands passes there"
)
"""Why the backward has dv="split" (a pass of its own recomputing dV with P split, after either engine's kernels)."""


def _dv_split_for_half_inputs(c: Config, p: Problem) -> str | None:
    if c["dv"] == "split" and p.get("dtype", "bf16") == "fp32":
        return "dv=split is for half inputs: float32 inputs compute P in float64, with no remainder to split"
    return None


def _delta_recomputed_for_half_inputs(c: Config, p: Problem) -> str | None:
    dtype = p.get("dtype", "bf16")
    if c["delta"] == "output" and dtype in ("bf16", "fp16"):
        return f"delta=output is refused for {dtype} inputs: {OUTPUT_DELTA_FAILED}"
    return None


def _suggest_backward(trial, problem: Problem) -> Config:
    _, _, _, nq, nk, _, _, _ = dims(problem)
    top = max(16, next_pow2(max(nq, nk)))
    blocks = [b for b in BACKWARD_BLOCKS if b <= top]
    gluon_runs = backward_gluon.runs_on(problem)
    dq = list(backward_gluon.DQ if gluon_runs else backward_gluon.DQ[:2])  # "combined" only where Gluon runs

    def draw(name: str, values: list):
        return trial.suggest_categorical(name, values) if len(values) > 1 else values[0]

    dv = draw("dv", ["rounded"] if problem.get("dtype") == "fp32" else ["rounded", "split"])
    if draw("engine", ["triton", "gluon"] if gluon_runs else ["triton"]) == "gluon":
        return {**backward_gluon.suggest(trial, draw, blocks, list(STAGES), dq), "dv": dv}
    return {
        **backward_gluon.TRITON,
        "BLOCK_M": draw("BLOCK_M", blocks),
        "BLOCK_N": draw("BLOCK_N", blocks),
        "num_warps": draw("num_warps", list(WARPS)),
        "num_stages": draw("num_stages", list(STAGES)),
        "dq": draw("dq", dq),
        "delta": draw("delta", ["output", "recomputed"]),
        "ds": draw("ds", ["rounded", "split"]),
        "dv": dv,
    }


BACKWARD_SPACE = SearchSpace(
    params=(
        Param("BLOCK_M", BACKWARD_BLOCKS),
        Param("BLOCK_N", BACKWARD_BLOCKS),
        Param("num_warps", WARPS),
        Param("num_stages", STAGES),
        Param("dq", backward_gluon.DQ),  # ("separate", "atomic") before the Gluon engine
        Param("delta", ("output", "recomputed")),
        Param("ds", ("rounded", "split")),
        Param("dv", ("rounded", "split")),  # since the dV pass: the kernel's SPEC `extends` the space without it
        *backward_gluon.PARAMS,  # since the Gluon engine: the kernel's SPEC `extends` the space without them
    ),
    default=BACKWARD_DEFAULT,
    constraints=(
        backward_gluon.engine_fixes_the_others,
        backward_gluon.gluon_where_it_runs,
        _delta_recomputed_for_half_inputs,
        _dv_split_for_half_inputs,
        *map(
            gluon.triton_only,
            (_backward_blocks_fit_problem, _backward_fits_registers, _backward_fits_shared_memory, _no_idle_warps),
        ),
    ),
    suggest_fn=_suggest_backward,
    starts_fn=backward_gluon.starts,
)
