"""Exports for code that does not depend on autotune: one kernel's best configs as a Python module of
`triton.Config` lists (per bucket, for `@triton.autotune(configs=...)`) or as a plain JSON file keyed by GPU,
dtype and bucket (the shape of vLLM's tuned-config files). A stored row is data: only plain values are
written, each as a Python or JSON literal."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Sequence
from typing import Any

from autotune.db.rows import BestRow
from autotune.space import LAUNCH_OPTIONS

PLAIN = (bool, int, float, str)
FORMATS = ("db", "triton", "json")


class UnportableRow(ValueError):
    """A row whose config holds something other than plain values (it cannot be written as a literal)."""


def _config(row: BestRow) -> dict[str, Any]:
    config = row.config
    for key, value in config.items():
        finite = not isinstance(value, float) or math.isfinite(value)
        if value is not None and (not isinstance(value, PLAIN) or not finite):
            raise UnportableRow(f"{row.kernel} {row.dtype} {row.bucket}: {key}={value!r} is not a plain value")
    return config


def _words(text: str) -> str:
    """text with nothing but word characters and . : = , - / kept: safe inside a docstring or comment."""
    return re.sub(r"[^\w.:=,/() -]", "_", text)


def as_json(rows: Sequence[BestRow]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """{gpu: {dtype: {bucket: config}}}: each config flat, launch options (num_warps, num_stages) beside kwargs."""
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for row in rows:
        out.setdefault(row.gpu, {}).setdefault(row.dtype, {})[row.bucket] = _config(row)
    return out


def _identifier(text: str) -> str:
    name = re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").upper()
    return name if name and not name[0].isdigit() else f"B_{name}"


def _triton_config(config: dict[str, Any]) -> str:
    kwargs = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
    options = "".join(f", {k}={config[k]!r}" for k in LAUNCH_OPTIONS if k in config)
    return f"triton.Config({kwargs!r}{options})"


def as_triton_module(kernel: str, gpu: str, rows: Sequence[BestRow], *, source: str = "") -> str:
    """A Python module: per (dtype, bucket) a list named like FP16_N_8192 holding its tuned triton.Config,
    `CONFIGS[(dtype, bucket)]` over them, and `ALL_CONFIGS` (each distinct config once, for one
    `@triton.autotune(configs=ALL_CONFIGS, key=[...])` that picks among the tuned winners per shape)."""
    lines = [
        f'"""Tuned configs of {_words(kernel)} on {_words(gpu)}, exported by autotune{_words(source)}.',
        "",
        "@triton.autotune(configs=ALL_CONFIGS, key=[...]) picks among them per shape; CONFIGS[(dtype, bucket)]",
        'holds one bucket\'s list (buckets as autotune keys them: sizes rounded up to powers of two)."""',
        "",
        "import triton",
        "",
    ]
    names, seen, distinct = {}, set(), []
    for row in sorted(rows, key=lambda r: (r.dtype, r.bucket)):
        config = _config(row)
        name = _identifier(f"{row.dtype}_{row.bucket}")
        while name in names.values():
            name += "_"
        names[(row.dtype, row.bucket)] = name
        text = _triton_config(config)
        lines.append(
            f"{name} = [{text}]  # {row.time_ms:.4g} ms"
            + (f", {row.speedup_vs_default:.3g}x the default" if row.speedup_vs_default else "")
        )
        if text not in seen:
            seen.add(text)
            distinct.append(name)
    lines += ["", "CONFIGS = {"]
    lines += [f"    ({dtype!r}, {bucket!r}): {name}," for (dtype, bucket), name in names.items()]
    lines += ["}", "", "ALL_CONFIGS = [" + ", ".join(f"*{n}" for n in distinct) + "]", ""]
    return "\n".join(lines)


def write_new(path: str, text: str) -> None:
    """Write text to a file that must not exist yet, whole or not at all (FileExistsError if it exists)."""
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".autotune-export-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.link(temp, target)  # fails if target exists: never overwrites
    finally:
        os.unlink(temp)


def json_text(rows: Sequence[BestRow]) -> str:
    return json.dumps(as_json(rows), indent=2, sort_keys=True) + "\n"
