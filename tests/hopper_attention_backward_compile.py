"""Compiles the Gluon attention backward (autotune/kernels/attention/hopper_backward.py) for Hopper (sm_90a) with a
given Triton, without a GPU, through hopper_compile.py's stand-in driver;
test_gluon_attention_backward_compiles_for_hopper.py runs it with the GPU machine's Triton.

    python tests/hopper_attention_backward_compile.py TRITON_DIR [--case NAME ...]

Prints JSON lines: first {"triton": version, "path": where it was imported from}, then one per case of CASES:
{"name", "head_dim", "causal", "dtype", "config", "ok", "seconds"} and, where it compiled, "kernels": for each
Gluon kernel launched ("delta" where DELTA="recomputed", "dkdv", and "dq" where DQ="separate") its "shared"
(bytes), "registers", "spill_stores", "spill_loads", "setmaxnreg" and "wgmma_serialized" (as
hopper_attention_compile.ptxas_report says them), or else "error".
"""

from __future__ import annotations

import json
import sys
import time
import warnings

from hopper_attention_compile import ptxas_report
from hopper_compile import compile_with_given_triton, describe

TWO = {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 2, "NUM_CONSUMERS": 2, "CONSUMER_REGISTERS": 240, "DQ": "atomic",
       "SPLIT_DS": False, "EARLY_DP": False, "PINGPONG": False, "DELTA": "recomputed"}  # fmt: skip
ONE = {**TWO, "NUM_CONSUMERS": 1, "CONSUMER_REGISTERS": 232}
CASES = [
    (f"d{d}-{'causal' if causal else 'full'}-{name}", d, causal, "bfloat16", config)
    for d in (64, 128)
    for causal in (False, True)
    for name, config in (("atomic", TWO), ("separate", {**TWO, "DQ": "separate"}))
] + [
    ("d128-full-one-consumer", 128, False, "bfloat16", ONE),
    ("d128-full-combined", 128, False, "bfloat16", {**TWO, "DQ": "combined"}),
    ("d128-causal-combined-three-stages", 128, True, "bfloat16", {**TWO, "DQ": "combined", "NUM_STAGES": 3}),
    ("d64-causal-combined-split-ds", 64, True, "bfloat16", {**TWO, "DQ": "combined", "SPLIT_DS": True}),
    ("d128-full-early-dp", 128, False, "bfloat16", {**TWO, "EARLY_DP": True}),
    ("d128-causal-split-ds-separate", 128, True, "bfloat16", {**TWO, "SPLIT_DS": True, "DQ": "separate"}),
    ("d64-causal-split-ds", 64, True, "bfloat16", {**TWO, "SPLIT_DS": True}),
    ("d128-causal-output-delta", 128, True, "bfloat16", {**TWO, "DELTA": "output", "DQ": "separate"}),
    ("d64-full-m128", 64, False, "bfloat16", {**TWO, "BLOCK_M": 128}),
    ("d64-causal-m128-separate", 64, True, "bfloat16", {**TWO, "BLOCK_M": 128, "DQ": "separate"}),
    ("d128-full-three-stages-fp16", 128, False, "float16", {**TWO, "NUM_STAGES": 3, "DQ": "separate"}),
    ("d128-causal-one-stage", 128, True, "bfloat16", {**TWO, "NUM_STAGES": 1}),
    ("d128-full-pingpong-separate", 128, False, "bfloat16", {**TWO, "PINGPONG": True, "DQ": "separate"}),
    ("d128-full-pingpong-combined", 128, False, "bfloat16", {**TWO, "PINGPONG": True, "DQ": "combined"}),
    ("d128-full-pingpong-atomic", 128, False, "bfloat16", {**TWO, "PINGPONG": True}),
    ("d128-causal-pingpong-separate", 128, True, "bfloat16", {**TWO, "PINGPONG": True, "DQ": "separate"}),
    ("d128-causal-pingpong-combined", 128, True, "bfloat16", {**TWO, "PINGPONG": True, "DQ": "combined"}),
    ("d64-causal-pingpong-atomic", 64, True, "bfloat16", {**TWO, "PINGPONG": True}),
    (
        "d64-full-pingpong-combined-m128",
        64,
        False,
        "bfloat16",
        {**TWO, "PINGPONG": True, "DQ": "combined", "BLOCK_M": 128},
    ),
    (
        "d128-full-pingpong-early-dp-split-ds",
        128,
        False,
        "bfloat16",
        {**TWO, "PINGPONG": True, "EARLY_DP": True, "SPLIT_DS": True, "DQ": "separate"},
    ),
]
"""(name, head dim, causal, dtype, config): dQ by atomics and by its own pass, both head dims, causal or not, one
and two consumers, dP issued early, dS split, 128-query blocks at head dim 64, a deeper and a shallower ring,
both dtypes; the two consumers taking turns (PINGPONG) with each dQ, causal (the second consumer's skipped blocks)
or not, with dP early and dS split."""


def compile_cases(names: list[str]) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "no GPU found and Triton was imported before autotune")  # wanted here
        from autotune.kernels.attention import hopper_backward

    for name, d, causal, dtype, config in CASES:
        if names and name not in names:
            continue
        start = time.perf_counter()
        result: dict[str, object] = {"name": name, "head_dim": d, "causal": causal, "dtype": dtype, "config": config}
        try:
            # 4 query heads on 2 key heads (GQA), lengths that no block divides.
            q = torch.zeros(1, 4, 200, d, dtype=getattr(torch, dtype))
            kv = torch.zeros(1, 2, 300, d, dtype=q.dtype)
            kernels = hopper_backward.launch(
                q,
                q,
                kv,
                kv,
                q,
                torch.zeros(1, 4, 200),
                torch.empty_like(q),
                torch.empty_like(kv),
                torch.empty_like(kv),
                causal,
                0.125,
                config,
            )
            result.update(
                ok=True,
                kernels={
                    which: {"shared": kernel.metadata.shared, **ptxas_report(kernel.asm["ptx"])}
                    for which, kernel in kernels.items()
                    if kernel is not None
                },
            )
        except Exception as e:
            result.update(ok=False, error=describe(e))
        result["seconds"] = round(time.perf_counter() - start, 2)
        print(json.dumps(result), flush=True)


def main() -> None:
    names = []
    while "--case" in sys.argv:  # before compile_with_given_triton parses the rest
        at = sys.argv.index("--case")
        names.append(sys.argv[at + 1])
        del sys.argv[at : at + 2]
    compile_with_given_triton(__doc__.splitlines()[0], lambda: compile_cases(names))


if __name__ == "__main__":
    main()
