"""layer_norm / rms_norm: the forward holds rows whole in registers ("single") or streams them in chunks
("looped"); the backward sums the weight and bias gradients over rows through per-program partial rows
and a second small kernel ("partials") or atomics ("atomic"), reading each row once or twice, in one of two
kernels: the first, one row at a time in float64 ("rows64"), or "tiles": BLOCK_M one-block rows at a time, in
float32 for 16-bit data (kernels/norm/layer_norm_backward_tiles.py), or "tiles_early": the tiles kernel for one-block
rows read once with a fused residual, loading the sum's gradient with the row rather than after its sums
(kernels/norm/layer_norm_backward_tiles_early.py), or "tiles_ahead": the tiles kernel for one-block rows read once,
loading the next rows while the current ones' sums reduce, the three sums in one reduction
(kernels/norm/layer_norm_backward_tiles_ahead.py).

Every constraint depends on the problem only through next_pow2(rows) and next_pow2(N), the numbers of
its bucket: a config that runs on one problem of a bucket runs on all of them.
"""

from __future__ import annotations

import math

from autotune.space import Config, Param, Problem, SearchSpace, next_pow2, powers_of_two

MIN_BLOCK = 16
MAX_BLOCK = 65536
MAX_FORWARD_ELEMENTS_PER_THREAD = 64
MAX_BACKWARD_ELEMENTS_PER_THREAD = 16
"""The backward holds several row-sized float64 arrays (x, dy, weight, the centered x, two gradient sums),
two registers per element each, where the forward holds one or two float32 arrays."""
MAX_MULTI_ROW_BLOCK = 4096
WARPS = (1, 2, 4, 8, 16, 32)
STAGES = (1, 2, 3, 4)
ROWS = (1, 2, 4, 8, 16)
PROGRAMS_PER_SM = (1, 2, 4, 8)
"""Programs of the backward per SM; each owns a partial row of the parameter gradients."""
BACKWARD_KERNELS = ("rows64", "tiles", "tiles_early", "tiles_ahead")
"""The backward's kernels: one row at a time in float64 (the first), or BLOCK_M rows at a time in the data's
accumulator (float32 for 16-bit data, float64 for float32 data), or that with every load of a row issued before
its sums (one read, a residual's gradient to add), or with the next rows' loads issued before the current rows'
sums, which reduce in one pass (one read)."""
TILES_KERNELS = ("tiles", "tiles_early", "tiles_ahead")
"""The kernels that hold BLOCK_M rows at a time where they read a row once."""
BEFORE_TILES_EARLY = ("rows64", "tiles")
"""The backward's kernels before "tiles_early"."""
BEFORE_TILES_AHEAD = ("rows64", "tiles", "tiles_early")
"""The backward's kernels before "tiles_ahead"."""
BACKWARD_ROWS = (1, 2, 4, 8)
"""Rows the tiles kernel holds at once (BLOCK_M) where it reads each row once: more loads in flight for short rows."""
BEFORE_TILES: Config = {"kernel": "rows64", "BLOCK_M": 1}
"""The backward's parameters since the tiles kernel, at what every config stored before it meant."""
BLOCKS = powers_of_two(MIN_BLOCK, MAX_BLOCK)

FORWARD_DEFAULT: Config = {"variant": "looped", "BLOCK_N": 1024, "ROWS_PER_PROGRAM": 1, "num_warps": 4, "num_stages": 2}
"""The forward fallback: looped runs (and is right) on rows of any length."""
READS = (1, 2)
"""Reads of each row by the backward: once, its tiles held across the row sums (one-block rows only), or twice."""
BACKWARD_DEFAULT: Config = {
    "variant": "partials",
    "BLOCK_N": 1024,
    "READS": 2,
    "PROGRAMS_PER_SM": 2,
    "num_warps": 4,
    "num_stages": 2,
    **BEFORE_TILES,
}
"""The backward fallback: a 1024 block covers short rows in one chunk and long ones in several."""


def row_shape(problem: Problem) -> tuple[int, int]:
    """(rows, N): how many rows are normalized and how many elements each holds (the normalized dims)."""
    shape = list(problem["shape"])
    k = problem.get("norm_dims", 1)
    return math.prod(shape[: len(shape) - k]), math.prod(shape[len(shape) - k :])


def full_block(n: int) -> int:
    """The block that holds a whole row: its length rounded up to a power of two."""
    return max(MIN_BLOCK, next_pow2(n))


def _is_default(c: Config) -> bool:
    return c == FORWARD_DEFAULT or c == BACKWARD_DEFAULT


def _forward_block_fits_variant(c: Config, p: Problem) -> str | None:
    full = full_block(row_shape(p)[1])
    if c["variant"] == "single" and c["BLOCK_N"] != full:
        # Smaller cannot hold the row; larger only adds masked lanes.
        return f"single needs BLOCK_N == {full} (the row length rounded up to a power of two)"
    if c["variant"] == "looped" and c["BLOCK_N"] >= full and not _is_default(c):
        # One chunk per row: looped reads the row twice where single reads it once. The default is exempt:
        # the runtime falls back to it on every problem, where it is right, only slower.
        return "looped with a block that holds the whole row: single reads it once instead of twice"
    return None


def _single_has_no_loop(c: Config, p: Problem) -> str | None:
    if c["variant"] == "single" and c["num_stages"] != 1:
        return "single has no loop to pipeline: num_stages must be 1"
    return None


def _forward_fits_in_registers(c: Config, p: Problem) -> str | None:
    # The tile lives in registers; past this the compiler spills to local memory.
    if c["ROWS_PER_PROGRAM"] * c["BLOCK_N"] > MAX_FORWARD_ELEMENTS_PER_THREAD * 32 * c["num_warps"]:
        return f"ROWS_PER_PROGRAM * BLOCK_N > {MAX_FORWARD_ELEMENTS_PER_THREAD} elements per thread"
    return None


def _no_idle_warps(c: Config, p: Problem) -> str | None:
    # A tile smaller than the program's threads leaves warps with nothing to do; one warp is the floor.
    if c["num_warps"] > 1 and c.get("ROWS_PER_PROGRAM", c.get("BLOCK_M", 1)) * c["BLOCK_N"] < 32 * c["num_warps"]:
        return "ROWS_PER_PROGRAM * BLOCK_N < 32 * num_warps: idle warps"
    return None


def _rows_only_for_short_blocks(c: Config, p: Problem) -> str | None:
    # Several rows per program amortize the reductions over short rows; a long row fills a program alone.
    if c["ROWS_PER_PROGRAM"] > 1 and c["BLOCK_N"] > MAX_MULTI_ROW_BLOCK:
        return f"ROWS_PER_PROGRAM > 1 needs BLOCK_N <= {MAX_MULTI_ROW_BLOCK}"
    return None


def _rows_exist(c: Config, p: Problem) -> str | None:
    # Row slots past the last row are masked work in every program.
    if c["ROWS_PER_PROGRAM"] > next_pow2(row_shape(p)[0]):
        return "ROWS_PER_PROGRAM exceeds the number of rows rounded up to a power of two"
    return None


def _suggest_forward(trial, problem: Problem) -> Config:
    """Variant first; single's block and stages follow from the row, so only looped draws them."""
    variant = trial.suggest_categorical("variant", ["single", "looped"])
    rows = trial.suggest_categorical("ROWS_PER_PROGRAM", list(ROWS))
    warps = trial.suggest_categorical("num_warps", list(WARPS))
    if variant == "single":
        return {
            "variant": variant,
            "BLOCK_N": full_block(row_shape(problem)[1]),
            "ROWS_PER_PROGRAM": rows,
            "num_warps": warps,
            "num_stages": 1,
        }
    return {
        "variant": variant,
        "BLOCK_N": trial.suggest_categorical("BLOCK_N", list(BLOCKS)),
        "ROWS_PER_PROGRAM": rows,
        "num_warps": warps,
        "num_stages": trial.suggest_categorical("num_stages", list(STAGES)),
    }


FORWARD_SPACE = SearchSpace(
    params=(
        Param("variant", ("single", "looped")),
        Param("BLOCK_N", BLOCKS),
        Param("ROWS_PER_PROGRAM", ROWS),
        Param("num_warps", WARPS),
        Param("num_stages", STAGES),
    ),
    default=FORWARD_DEFAULT,
    constraints=(
        _forward_block_fits_variant,
        _single_has_no_loop,
        _forward_fits_in_registers,
        _no_idle_warps,
        _rows_only_for_short_blocks,
        _rows_exist,
    ),
    suggest_fn=_suggest_forward,
)


def one_chunk_fits(block: int, warps: int) -> bool:
    """Whether the backward can hold a row of `block` elements in registers with `warps` warps."""
    return block <= MAX_BACKWARD_ELEMENTS_PER_THREAD * 32 * warps


def _backward_block_fits_row(c: Config, p: Problem) -> str | None:
    full = full_block(row_shape(p)[1])
    if _is_default(c):
        return None  # runs everywhere: one masked chunk for short rows, several for long ones
    if c["BLOCK_N"] > full:
        return f"BLOCK_N > {full} (the row length rounded up to a power of two): only masked lanes"
    if c["BLOCK_N"] < full and one_chunk_fits(full, max(WARPS)):
        # Chunks read x and dy twice; only rows that no program can hold in registers are worth it.
        return (
            f"chunks are for rows wider than {MAX_BACKWARD_ELEMENTS_PER_THREAD * 32 * max(WARPS)}"
            f": BLOCK_N must be {full}"
        )
    return None


def _one_read_holds_the_row(c: Config, p: Problem) -> str | None:
    if c["READS"] == 1 and c["BLOCK_N"] < full_block(row_shape(p)[1]):
        return "READS=1 holds the row in one block: BLOCK_N must cover the row"
    return None


def _backward_fits_in_registers(c: Config, p: Problem) -> str | None:
    if not one_chunk_fits(c["BLOCK_N"], c["num_warps"]):
        return f"BLOCK_N > {MAX_BACKWARD_ELEMENTS_PER_THREAD} elements per thread"
    return None


def _rows_at_once_in_tiles_read_once(c: Config, p: Problem) -> str | None:
    if c["BLOCK_M"] == 1:
        return None
    if c["kernel"] not in TILES_KERNELS:
        return "BLOCK_M > 1 rows at a time needs kernel=tiles, tiles_early or tiles_ahead"
    if c["READS"] != 1:
        return "BLOCK_M > 1 holds rows across their sums: READS must be 1"
    if c["BLOCK_M"] > next_pow2(row_shape(p)[0]):
        return "BLOCK_M exceeds the number of rows rounded up to a power of two"
    if not one_chunk_fits(c["BLOCK_M"] * c["BLOCK_N"], c["num_warps"]):
        return f"BLOCK_M * BLOCK_N > {MAX_BACKWARD_ELEMENTS_PER_THREAD} elements per thread"
    return None


def _early_loads_where_a_residual_row_is_read_once(c: Config, p: Problem) -> str | None:
    if c["kernel"] != "tiles_early":
        return None
    if c["READS"] != 1:
        return "kernel=tiles_early reads each row once: READS must be 1"
    if not p.get("residual"):
        return "kernel=tiles_early differs from tiles only in loading a fused residual's gradient: none here"
    return None


MAX_AHEAD_ROW_PER_THREAD = MAX_BACKWARD_ELEMENTS_PER_THREAD // 2
MAX_AHEAD_WARPS = 16
"""tiles_ahead holds the next tile of rows beside the current one. ptxas for sm_90a (the H100's Triton 3.6, bf16, a
residual; tests/test_norm_backward_tiles_compiles_for_hopper_without_spilling.py): no spills at 16 warps with rows of
up to 8 elements a thread (4096 columns, one or two rows at a time); a layer_norm row of 16 (8192 columns) spills 48 B
a thread, its row-long vectors (the weight, two gradient sums) counting with the tiles; at 32 warps, 64 registers a
thread, every tile of 8 or more elements a thread spills."""


def _ahead_reads_a_row_once(c: Config, p: Problem) -> str | None:
    if c["kernel"] != "tiles_ahead":
        return None
    if c["READS"] != 1:
        return "kernel=tiles_ahead holds the next rows while the current ones reduce: READS must be 1"
    if c["num_warps"] > MAX_AHEAD_WARPS:
        return f"kernel=tiles_ahead holds two tiles: at most {MAX_AHEAD_WARPS} warps (more leave too few registers)"
    if c["BLOCK_N"] > MAX_AHEAD_ROW_PER_THREAD * 32 * c["num_warps"]:
        return f"kernel=tiles_ahead holds two tiles: BLOCK_N > {MAX_AHEAD_ROW_PER_THREAD} elements per thread"
    return None


def _suggest_backward(trial, problem: Problem) -> Config:
    """The kernel, reduction variant and grid first; the block follows from the row unless the row needs
    chunks; the tiles kernel draws its rows at once where it reads a row once."""
    full = full_block(row_shape(problem)[1])
    config = {
        "kernel": trial.suggest_categorical("kernel", list(BACKWARD_KERNELS)),
        "variant": trial.suggest_categorical("variant", ["partials", "atomic"]),
        "PROGRAMS_PER_SM": trial.suggest_categorical("PROGRAMS_PER_SM", list(PROGRAMS_PER_SM)),
        "num_warps": trial.suggest_categorical("num_warps", list(WARPS)),
        "num_stages": trial.suggest_categorical("num_stages", list(STAGES)),
    }
    wide = not one_chunk_fits(full, max(WARPS))
    config["BLOCK_N"] = trial.suggest_categorical("BLOCK_N", list(BLOCKS)) if wide else min(full, MAX_BLOCK)
    config["READS"] = 2 if wide else trial.suggest_categorical("READS", list(READS))
    one_read_tiles = config["kernel"] in TILES_KERNELS and config["READS"] == 1
    config["BLOCK_M"] = trial.suggest_categorical("BLOCK_M", list(BACKWARD_ROWS)) if one_read_tiles else 1
    return config


BACKWARD_SPACE = SearchSpace(
    params=(
        Param("variant", ("partials", "atomic")),
        Param("BLOCK_N", BLOCKS),
        Param("READS", READS),
        Param("PROGRAMS_PER_SM", PROGRAMS_PER_SM),
        Param("num_warps", WARPS),
        Param("num_stages", STAGES),
        # Since the tiles kernel: the kernels' specs `extend` the space without them (BEFORE_TILES), and the
        # spaces whose kernels were BEFORE_TILES_EARLY and BEFORE_TILES_AHEAD.
        Param("kernel", BACKWARD_KERNELS),
        Param("BLOCK_M", BACKWARD_ROWS),
    ),
    default=BACKWARD_DEFAULT,
    constraints=(
        _backward_block_fits_row,
        _one_read_holds_the_row,
        _backward_fits_in_registers,
        _no_idle_warps,
        _rows_at_once_in_tiles_read_once,
        _early_loads_where_a_residual_row_is_read_once,
        _ahead_reads_a_row_once,
    ),
    suggest_fn=_suggest_backward,
)


def bucket(problem: Problem) -> str:
    """Rows and row length, each rounded up to a power of two, and whether a residual is fused (1) or not (0)."""
    rows, n = row_shape(problem)
    return f"m={next_pow2(rows)},n={next_pow2(n)},res={int(bool(problem.get('residual')))}"
