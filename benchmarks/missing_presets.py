"""The --shape arguments of KERNEL's presets that no database holds a current-source row for, in one dtype and
on one GPU: what a device call searches next (`search_missing` in device_calls.sh).

    python benchmarks/missing_presets.py KERNEL DTYPE GPU DB...      e.g. flash_attn_backward fp16 H100 shipped.sqlite

Presets print D = 128 first, then causal ones; a database file that does not exist (yet) counts as empty.
"""
import pathlib
import sys

import autotune  # first: picks the interpreter without a GPU, before Triton is imported
from autotune.db import ConfigStore
from autotune.spec import shape_label


def label(problem: dict) -> str:
    """The --shape text of a preset: shape_label, plus the layout where the kernel's parser takes one."""
    return shape_label(problem) + (",layout=channels_last" if problem.get("layout") == "channels_last" else "")


def main(kernel: str, dtype: str, gpu: str, *dbs: str) -> None:
    spec = autotune.get(kernel)
    have: set[str] = set()
    for path in dbs:
        if pathlib.Path(path).is_file():
            with ConfigStore(path, readonly=True) as store:
                have |= {row.bucket for row in store.best_rows(kernel=kernel, gpu=gpu, dtype=dtype,
                                                               source_hash=spec.source_hash)}
    order = sorted(spec.presets, key=lambda p: (p.get("head_dim", 0) != 128, not p.get("causal", False)))
    print(" ".join(f"--shape {label(p)}" for p in order if spec.bucket(p) not in have))


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
