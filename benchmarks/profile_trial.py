"""Where one search trial's seconds go: an in-process Evaluator (what the isolated worker runs) checks and times
three configs of the matmul family on one shape under cProfile, and prints each one's top functions.

    python benchmarks/profile_trial.py linear 8192x4096x16384,bias,gelu_tanh   (on the GPU)
"""

import cProfile
import importlib
import io
import pstats
import sys
import time

import torch

importlib.import_module("autotune")  # the interpreter choice, before Triton
from autotune import registry  # noqa: E402
from autotune.search import Evaluator  # noqa: E402
from autotune.verify import default_max_numel  # noqa: E402

TILE = {"variant": "tma", "BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 4, "num_warps": 8, "num_stages": 4, "SPLIT_K": 1}
CONFIGS = [TILE, dict(TILE, BLOCK_M=128, BLOCK_N=256, GROUP_M=8, num_stages=3), dict(TILE, BLOCK_M=128, BLOCK_N=256, num_stages=3)]

spec = registry.get(sys.argv[1])
started = time.perf_counter()
evaluator = Evaluator(spec, spec.parse_shape(sys.argv[2]), torch.bfloat16, examples=20, seed=0, max_numel=default_max_numel())
print(f"prepare {time.perf_counter() - started:.1f} s", flush=True)
for number, config in enumerate(CONFIGS):
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    outcome = evaluator(config, number)
    profile.disable()
    print(f"config {number}: {outcome.outcome} {outcome.time_ms} ms, {time.perf_counter() - started:.1f} s; "
          f"problems {len(evaluator.problems_for(config))}", flush=True)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(28)
    print(text.getvalue()[-6000:], flush=True)
