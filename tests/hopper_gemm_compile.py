"""Compiles the Gluon Hopper GEMM (autotune/kernels/gemm/hopper_gemm.py) for sm_90a with a given Triton, without a
GPU, through hopper_compile.py's stand-in driver; test_gluon_gemm_compiles_for_hopper.py runs it with the GPU
machine's Triton.

    python tests/hopper_gemm_compile.py TRITON_DIR [--case NAME ...]

Prints JSON lines: first {"triton": version, "path": where it was imported from}, then one per case of CASES:
{"name", "gated", "layout", "dtype", "config", "ok", "seconds"} and, where it compiled, "shared" (bytes the
program takes), "registers", "spill_stores", "spill_loads", "setmaxnreg" and "wgmma_serialized" (as
hopper_attention_compile.ptxas_report says them), or else "error".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

from hopper_attention_compile import ptxas_report
from hopper_compile import compile_with_given_triton, describe

COOPERATIVE = {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_STAGES": 3, "NUM_CONSUMERS": 2,
               "SCHEDULE": "cooperative", "GROUP_M": 8, "CONSUMER_REGISTERS": 240}  # fmt: skip
PINGPONG = {**COOPERATIVE, "BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 4, "SCHEDULE": "pingpong"}
TALL = {**COOPERATIVE, "BLOCK_M": 128, "BLOCK_N": 128}
ONE = {**COOPERATIVE, "BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 4, "NUM_CONSUMERS": 1, "CONSUMER_REGISTERS": 232}
GATED = {**COOPERATIVE, "BLOCK_N": 128}
GATED_PINGPONG = {**PINGPONG, "BLOCK_N": 64}
LAYOUTS = ("nt", "nn", "tn", "tt")
"""a row-major (n) or transposed (t), then b: "nt" is x @ weight.T (linear's forward), "nn" dy @ weight (its
dx), "tn" dy.T @ x (its dweight)."""
CASES = [(f"plain-{layout}-cooperative", False, layout, "bfloat16", COOPERATIVE) for layout in LAYOUTS] + [
    ("plain-nt-pingpong", False, "nt", "bfloat16", PINGPONG),
    ("plain-tn-pingpong", False, "tn", "bfloat16", PINGPONG),
    ("plain-nt-tall", False, "nt", "bfloat16", TALL),
    ("plain-nn-one-consumer", False, "nn", "bfloat16", ONE),
    ("plain-nt-cooperative-fp16", False, "nt", "float16", COOPERATIVE),
    ("gated-nt-cooperative", True, "nt", "bfloat16", GATED),
    ("gated-nt-cooperative-store-gu", True, "nt+gu", "bfloat16", GATED),
    ("gated-tn-pingpong-store-gu", True, "tn+gu", "bfloat16", GATED_PINGPONG),
]
"""(name, gated, layout, dtype, config): every operand layout, both schedules, one and two consumers, both dtypes,
the gated GEMM with and without storing [g | u]."""


def _operand(rows: int, cols: int, transposed: bool, dtype):
    """A (rows, cols) tensor, row-major or the transpose of a row-major (cols, rows) one."""
    import torch

    return torch.zeros(cols, rows, dtype=dtype).t() if transposed else torch.zeros(rows, cols, dtype=dtype)


def compile_cases(names: list[str]) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "no GPU found and Triton was imported before autotune")  # wanted here
        from autotune.kernels.gemm import hopper_gemm

    for name, gated, layout, dtype, config in CASES:
        if names and name not in names:
            continue
        start = time.perf_counter()
        result: dict[str, object] = {"name": name, "gated": gated, "layout": layout, "dtype": dtype, "config": config}
        try:
            # Sizes no block divides.
            m, k, n = 200, 136, 320
            torch_dtype = getattr(torch, dtype)
            a = _operand(m, k, layout[0] == "t", torch_dtype)
            if gated:
                # the weights (n, k), read as b = w.T: row-major where b is "t"
                w = _operand(n, k, layout[1] == "n", torch_dtype)
                gu = torch.empty(m, 2 * n, dtype=torch_dtype) if layout.endswith("+gu") else None
                kernel = hopper_gemm.launch_gated(a, w, w, torch.empty(m, n, dtype=torch_dtype), gu, "silu", config)
            else:
                b = _operand(k, n, layout[1] == "t", torch_dtype)
                kernel = hopper_gemm.launch_matmul(a, b, torch.empty(m, n, dtype=torch_dtype), config)
            result.update(ok=True, shared=kernel.metadata.shared, **ptxas_report(kernel.asm["ptx"]))
        except Exception as e:
            result.update(ok=False, error=describe(e))
        result["seconds"] = round(time.perf_counter() - start, 2)
        print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--case", action="append", default=[])
    known, rest = parser.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    compile_with_given_triton(__doc__.splitlines()[0], lambda: compile_cases(known.case))


if __name__ == "__main__":
    main()
