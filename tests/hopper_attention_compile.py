"""Compiles the Gluon attention forward (autotune/kernels/attention/hopper_forward.py) for Hopper (sm_90a) with a
given Triton, without a GPU, through hopper_compile.py's stand-in driver; test_gluon_attention_compiles_for_hopper.py
runs it with the GPU machine's Triton.

    python tests/hopper_attention_compile.py TRITON_DIR

Prints JSON lines: first {"triton": version, "path": where it was imported from}, then one per case of CASES:
{"name", "head_dim", "causal", "dtype", "config", "ok", "seconds"} and, where it compiled, "shared" (bytes the
program takes), "registers" (the launch's per-thread limit, as ptxas reports it), "spill_stores" and
"spill_loads" (bytes, from ptxas -v), "setmaxnreg" (the register counts the partitions switch to),
"wgmma_serialized" (whether ptxas serialized the asynchronous wgmmas), or else "error".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import warnings

from hopper_compile import compile_with_given_triton, describe

TWO = {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "NUM_CONSUMERS": 2, "PINGPONG": True, "CONSUMER_REGISTERS": 240}
ONE = {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 3, "NUM_CONSUMERS": 1, "PINGPONG": False, "CONSUMER_REGISTERS": 232}
CASES = [
    (f"d{d}-{'causal' if causal else 'full'}-{name}", d, causal, "bfloat16", config)
    for d in (64, 128)
    for causal in (False, True)
    for name, config in (("pingpong", TWO), ("one", ONE))
] + [
    ("d128-full-two-no-pingpong", 128, False, "bfloat16", {**TWO, "PINGPONG": False}),
    ("d64-causal-three-stages", 64, True, "bfloat16", {**TWO, "NUM_STAGES": 3}),
    ("d128-full-pingpong-fp16", 128, False, "float16", TWO),
]
"""(name, head dim, causal, dtype, config): each consumer count, with and without ping-pong, both head dims,
causal or not, both dtypes."""


def ptxas_report(ptx: str) -> dict[str, object]:
    """Registers and spills of the PTX, as the Triton's own ptxas reports them (-v) for sm_90a."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as where:
        source = os.path.join(where, "kernel.ptx")
        with open(source, "w") as f:
            f.write(ptx)
        log = subprocess.run(
            [get_ptxas(90).path, "-v", "--gpu-name=sm_90a", source, "-o", source + ".o"],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    registers = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {
        "registers": int(registers.group(1)) if registers else None,
        "spill_stores": int(spills.group(1)) if spills else None,
        "spill_loads": int(spills.group(2)) if spills else None,
        "setmaxnreg": sorted({int(n) for n in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}),
        # ptxas serializes the wgmmas (C7514) where registers of one in flight are read before its wait
        "wgmma_serialized": "wgmma.mma_async instructions are serialized" in log,
    }


def compile_cases() -> None:
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "no GPU found and Triton was imported before autotune")  # wanted here
        from autotune.kernels.attention import hopper_forward

    for name, d, causal, dtype, config in CASES:
        start = time.perf_counter()
        result: dict[str, object] = {"name": name, "head_dim": d, "causal": causal, "dtype": dtype, "config": config}
        try:
            # 2 query heads on 1 key head (GQA), lengths that no block divides.
            q = torch.zeros(1, 2, 200, d, dtype=getattr(torch, dtype))
            kv = torch.zeros(1, 1, 300, d, dtype=q.dtype)
            kernel = hopper_forward.launch(
                q, kv, kv, torch.empty_like(q), torch.empty(1, 2, 200), causal, 0.125, config
            )
            result.update(ok=True, shared=kernel.metadata.shared, **ptxas_report(kernel.asm["ptx"]))
        except Exception as e:
            result.update(ok=False, error=describe(e))
        result["seconds"] = round(time.perf_counter() - start, 2)
        print(json.dumps(result), flush=True)


def main() -> None:
    compile_with_given_triton(__doc__.splitlines()[0], compile_cases)


if __name__ == "__main__":
    main()
