"""`autotune db merge`: rows of other databases taken into one, every row of every file checked against its
kernel first, then all files' rows written in one transaction, or none of them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from autotune import gpu
from autotune.db import BestRow, ConfigStore, rows_to_merge
from autotune.runtime import registry
from autotune.spec import KernelSpec, dtype_from_name


def row_refusal(row: BestRow, specs: Mapping[str, KernelSpec] | None = None) -> str | None:
    """Why a stored row cannot be merged, or None: its kernel must be registered (or in `specs`, by name;
    a row's kernel text is never imported), its dtype a dtype, its config in the kernel's current space, and
    its config able to run on the problem it was timed on."""
    spec = (specs or {}).get(row.kernel)
    if spec is None:
        if row.kernel not in registry.names():
            return f"kernel {row.kernel!r} is not registered (load it with --kernel module:attr)"
        spec = registry.get(row.kernel)
    try:
        # Any dtype, not only spec.dtypes: those are what this machine runs (no bf16 GEMM under the interpreter),
        # not what a row may have been tuned for on a GPU.
        dtype = dtype_from_name(row.dtype)
    except ValueError as exc:
        return str(exc)
    try:
        config = spec.space.validate(spec.current_config(row))
        problem = row.problem
    except ValueError as exc:  # InvalidConfig, or JSON that is no object
        return f"config {row.config_json} is not in {spec.name}'s space: {exc}"
    if not problem:  # rows of the first autotune kept no problem; the runtime checks each call's own
        return None
    try:
        with gpu.judging_stored_rows():  # on the GPU it names, not necessarily this machine
            reason = spec.space.rejects(config, spec.problem_for(problem, dtype))
    except Exception as exc:  # a problem the kernel's constraints cannot read is no problem of this kernel
        return f"problem {row.problem_json} is not one of {spec.name}'s problems ({type(exc).__name__}: {exc})"
    if reason:
        return f"config {row.config_json} cannot run on its own problem {row.problem_json}: {reason}"
    return None


def read_files(
    files: Sequence[str | os.PathLike[str]], kernels: Sequence[KernelSpec] = ()
) -> list[tuple[str, list[BestRow]]]:
    """(file, its rows) for each file, read-only, once every row of every file is found fit to merge
    (`row_refusal`; `kernels` are specs to judge their rows by, besides the registered ones). MergeError
    naming the bad rows, or StoreError for a file that is no autotune database this autotune reads."""
    specs = {spec.name: spec for spec in kernels}
    return rows_to_merge(files, check=lambda row: row_refusal(row, specs))


def merge_files(
    store: ConfigStore, files: Sequence[str | os.PathLike[str]], kernels: Sequence[KernelSpec] = ()
) -> list[tuple[int, int]]:
    """Merge every file into store, keeping the faster row of each key, all files or none: (rows read, rows
    taken) per file."""
    return store.merge_rows(read_files(files, kernels))
