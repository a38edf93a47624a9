"""Two flash_attn configs of the GQA decode bucket (2x16/4x1:32768x128, one query against a 32k-key cache, heads in
groups of 4) side by side, per dtype (GPU): the shipped config (P split into two half operands, pointer loads, 32 key
splits) and the P-rounded configs a re-search found (twenty-eighth session, call G), which is the P variant that failed
long decode averages before (benchmarks/NOTES.md, "fp16 decode: P rounded ... fails the gate"):

1. the gate's check on extra long-decode problems of the bucket: Nk 16385, 24001 and 32767, q and k scaled by 1, 4
   and 8, over --seeds input seeds each (`verify.check_problem`, float64 reference, PyTorch's error budget);
2. their CUDA-graph times in one process, each config timed in order and in reverse twice (medians).

    python benchmarks/gqa_decode_configs.py --seeds 12 > results/gqa-decode-configs-GPU-DATE.txt
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import statistics
import time

import torch

from autotune.measure import bench
from autotune.kernels.attention.problems import forward_inputs, problem
from autotune.gate.verify import ReferenceCache, check_problem

flash_attn = importlib.import_module("autotune.kernels.attention.flash_attn")  # the package's name is the function

BASE = {"BLOCK_M": 16, "BLOCK_N": 64, "gqa": "packed", "mask": "every"}
SHIPPED = {**BASE, "KV_SPLITS": 32, "kv_load": "pointer", "num_stages": 2, "num_warps": 2, "p": "split"}
FOUND = {
    torch.bfloat16: {**BASE, "KV_SPLITS": 32, "kv_load": "descriptor", "num_stages": 2, "num_warps": 2, "p": "rounded"},
    torch.float16: {**BASE, "KV_SPLITS": 8, "kv_load": "descriptor", "num_stages": 4, "num_warps": 4, "p": "rounded"},
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12, help="input seeds per long-decode problem")
    args = parser.parse_args()
    long_decode = [problem(2, 16, 1, 128, kv_heads=4, nk=nk, magnitude=m)
                   for nk in (16385, 24001, 32767) for m in (1.0, 4.0, 8.0)]
    preset = problem(2, 16, 1, 128, kv_heads=4, nk=32768)
    for dtype, found in FOUND.items():
        configs = {"shipped (P split)": SHIPPED, "found (P rounded)": found}
        for name, config in configs.items():
            cache, failed, started = ReferenceCache(), [], time.time()
            for prob, seed in itertools.product(long_decode, range(args.seeds)):
                failure = check_problem(flash_attn.SPEC, config, prob, dtype, seed=seed, cache=cache)
                if failure is not None:
                    failed.append(f"Nk {prob['nk']}, magnitude {prob['magnitude']}, seed {seed}: {failure.reason}")
            print(f"{dtype} {name} {config}: {len(failed)} of {len(long_decode) * args.seeds} long-decode problems "
                  f"fail ({time.time() - started:.0f} s)", *failed[:5], sep="\n    ", flush=True)
        inputs = forward_inputs(preset, dtype, torch.device("cuda"), 0)
        o, lse = flash_attn.SPEC.baseline(inputs)
        out = (torch.empty_like(o), torch.empty_like(lse))
        times: dict[str, list[float]] = {name: [] for name in configs}
        for order in (configs, dict(reversed(configs.items()))) * 2:
            for name, config in order.items():
                times[name].append(bench.graph_ms(lambda config=config: flash_attn.SPEC.launch(inputs, config, out)))
        medians = {name: statistics.median(ms) for name, ms in times.items()}
        print(f"{dtype} graph ms at 2x16/4x1:32768x128: "
              + ", ".join(f"{name} {medians[name]:.5f} ({', '.join(f'{t:.5f}' for t in times[name])})" for name in configs)
              + f"; shipped / found {medians['shipped (P split)'] / medians['found (P rounded)']:.3f}", flush=True)


if __name__ == "__main__":
    main()
