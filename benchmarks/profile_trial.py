"""Where one search trial's seconds go: an in-process Evaluator (what the isolated worker runs) checks and times
configs of one kernel on one shape under cProfile, and prints each one's top functions and the evaluator's
phase seconds.

    python benchmarks/profile_trial.py linear 8192x4096x16384,bias,gelu_tanh   (on the GPU; three matmul tiles)
    python benchmarks/profile_trial.py layer_norm 8192x4096+res --dtype fp32 --config '{"variant": "single", ...}'
                                                                                (the space's default when no --config)
"""

import argparse
import cProfile
import importlib
import io
import json
import pstats
import time

importlib.import_module("autotune")  # the interpreter choice, before Triton
from autotune.runtime import registry  # noqa: E402
from autotune.engine.evaluate import Evaluator  # noqa: E402
from autotune.spec import DTYPES  # noqa: E402
from autotune.gate.verify import default_max_numel  # noqa: E402

TILE = {"variant": "tma", "BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 4, "num_warps": 8, "num_stages": 4, "SPLIT_K": 1}
GEMM_CONFIGS = [TILE, dict(TILE, BLOCK_M=128, BLOCK_N=256, GROUP_M=8, num_stages=3), dict(TILE, BLOCK_M=128, BLOCK_N=256, num_stages=3)]

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("kernel")
parser.add_argument("shape")
parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
parser.add_argument("--config", action="append", type=json.loads, default=[],
                    help="a config as JSON (repeatable); default: three matmul tiles for the matmul family, else the space's default")
parser.add_argument("--examples", type=int, default=20)
args = parser.parse_args()

spec = registry.get(args.kernel)
configs = args.config or (GEMM_CONFIGS if spec.name in ("matmul", "linear") else [dict(spec.space.default)])
started = time.perf_counter()
evaluator = Evaluator(spec, spec.parse_shape(args.shape), DTYPES[args.dtype], examples=args.examples, seed=0,
                      max_numel=default_max_numel())
print(f"prepare {time.perf_counter() - started:.1f} s", flush=True)
for number, config in enumerate(configs):
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    outcome = evaluator(config, number)
    profile.disable()
    print(f"config {number} {json.dumps(config, sort_keys=True)}: {outcome.outcome} {outcome.time_ms} ms "
          f"{outcome.reason or ''}, {time.perf_counter() - started:.1f} s; problems {len(evaluator.problems_for(config))}; "
          f"phases so far {({k: round(v, 1) for k, v in evaluator.seconds.items()})}", flush=True)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(28)
    print(text.getvalue()[-6000:], flush=True)
