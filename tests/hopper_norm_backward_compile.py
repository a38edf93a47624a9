"""Compiles the layer_norm / rms_norm backward's tiles kernel (autotune/kernels/norm/layer_norm_backward_tiles.py)
for Hopper (sm_90a) with a given Triton, without a GPU, through hopper_compile.py's stand-in driver, at the widest
one-block rows the space holds; test_norm_backward_tiles_compiles_for_hopper_without_spilling.py runs it with the
GPU machine's Triton.

    python tests/hopper_norm_backward_compile.py TRITON_DIR

Prints JSON lines: first {"triton": version, "path": where it was imported from}, then one per case of CASES:
{"norm", "dtype", "config", "ok", "seconds"} and, where it compiled, "registers", "spill_stores" and "spill_loads"
(bytes a thread, from ptxas -v), or else "error".
"""

from __future__ import annotations

import json
import time
import warnings

from hopper_attention_compile import ptxas_report
from hopper_compile import compile_with_given_triton, describe

COMMON = {"variant": "atomic", "PROGRAMS_PER_SM": 1, "num_stages": 2, "kernel": "tiles"}
CASES = [
    {**COMMON, "READS": reads, "BLOCK_M": rows, "BLOCK_N": block, "num_warps": warps}
    for reads, rows in ((1, 1), (1, 2), (2, 1))
    for block in (2048, 4096, 8192)
    for warps in (8, 16)
]
CASES += [
    {**COMMON, "kernel": "tiles_early", "READS": 1, "BLOCK_M": rows, "BLOCK_N": block, "num_warps": 16}
    for rows in (1, 2)
    for block in (4096, 8192)
]
CASES += [
    {**COMMON, "kernel": "tiles_ahead", "READS": 1, "BLOCK_M": rows, "BLOCK_N": block, "num_warps": warps}
    for rows in (1, 2)
    for block in (4096, 8192)
    for warps in (16, 32)
]
"""Configs at the widest rows of one block, read once (one and two rows at a time) or twice, and the tiles_early and
tiles_ahead kernels' (which hold the residual's gradient, and the next rows, too) at 16 warps (tiles_ahead at 32
too); the test keeps those the space accepts. bf16 data
(float32 arithmetic), a residual's gradient, weight and bias."""


def compile_cases() -> None:
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "no GPU found and Triton was imported before autotune")  # wanted here
        from autotune.kernels.norm import (
            layer_norm_backward,
            layer_norm_backward_tiles,
            layer_norm_backward_tiles_ahead,
            layer_norm_backward_tiles_early,
        )

    compiled = []

    class Keeping:
        """A kernel, keeping what each launch compiled."""

        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                compiled.append(self.kernel[grid](*args, **kwargs))

            return launch

    for module, name in ((layer_norm_backward_tiles, "_norm_backward_tiles_kernel"),
                         (layer_norm_backward_tiles_early, "_norm_backward_tiles_early_kernel"),
                         (layer_norm_backward_tiles_ahead, "_norm_backward_tiles_ahead_kernel")):  # fmt: skip
        setattr(module, name, Keeping(getattr(module, name)))
    for rms in (False, True):
        for config in CASES:
            start = time.perf_counter()
            result: dict[str, object] = {"norm": "rms_norm" if rms else "layer_norm", "dtype": "bfloat16",
                                         "config": config}  # fmt: skip
            try:
                rows, n = 4 * config["BLOCK_M"], config["BLOCK_N"]
                x, dy, dh, dx = (torch.zeros(rows, n, dtype=torch.bfloat16) for _ in range(4))
                w, b = (torch.zeros(n, dtype=torch.bfloat16) for _ in range(2))
                mean = None if rms else torch.zeros(2, rows)
                dw, db = w.clone(), None if rms else b
                layer_norm_backward.launch_rows(dy, x, w, mean, dh, dx, dw, db, 1e-5, rms, config)
                result.update(ok=True, **ptxas_report(compiled[-1].asm["ptx"]))
                result.pop("setmaxnreg")
            except Exception as e:
                result.update(ok=False, error=describe(e))
            result["seconds"] = round(time.perf_counter() - start, 2)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    compile_with_given_triton(__doc__.splitlines()[0], compile_cases)
