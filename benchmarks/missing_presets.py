"""The --shape arguments of KERNEL's presets that no database holds a current-source row for, in one dtype and
on one GPU: what a device call searches next (`search_missing` in device_calls.sh).

    python benchmarks/missing_presets.py KERNEL DTYPE GPU DB... [--also=SHAPE]...
                                            e.g. flash_attn_backward fp16 H100 shipped.sqlite

--also=SHAPE counts a shape that is not a preset (`--shape` text) as one, after the presets.

Presets print D = 128 first, then causal ones, one per bucket;
a database file that does not exist (yet) counts as empty. Each
shape text parses back to its preset (activation, layout and residual included), so the search times the preset.
"""

import pathlib
import sys

import autotune  # first: picks the interpreter without a GPU, before Triton is imported
from autotune.db import ConfigStore
from autotune.spec import KernelSpec, shape_label


def label(spec: KernelSpec, problem: dict) -> str:
    """The --shape text that parses back to preset problem: shape_label, plus what the kernel's parser takes
    where its defaults differ from the preset's (group_norm's groups, activation and layout; the norms' +res)."""
    text = shape_label(problem)
    if problem.get("residual") and not spec.parse_shape(text).get("residual"):
        text += "+res"
    for option in ("groups", "activation", "layout"):
        if option in problem and spec.parse_shape(text).get(option) != problem[option]:
            text += f",{option}={problem[option]}"
    if spec.parse_shape(text) != problem:
        sys.exit(f"{spec.name}: no --shape text found for preset {problem}")
    return text


def main(kernel: str, dtype: str, gpu: str, *args: str) -> None:
    spec = autotune.get(kernel)
    dbs = [a for a in args if not a.startswith("--also=")]
    also = [spec.parse_shape(a.removeprefix("--also=")) for a in args if a.startswith("--also=")]
    have: set[str] = set()
    for path in dbs:
        if pathlib.Path(path).is_file():
            with ConfigStore(path, readonly=True) as store:
                have |= {
                    row.bucket
                    for row in spec.current_rows(
                        store.best_rows(kernel=kernel, gpu=gpu, dtype=dtype, source_hash=spec.current_hashes)
                    )
                }
    order = sorted(spec.presets, key=lambda p: (p.get("head_dim", 0) != 128, not p.get("causal", False))) + also
    shapes = []
    for problem in order:  # the first preset of each bucket: a second would search the same bucket again
        if spec.bucket(problem) not in have:
            have.add(spec.bucket(problem))
            shapes.append(f"--shape {label(spec, problem)}")
    print(" ".join(shapes))


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
