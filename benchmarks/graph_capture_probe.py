"""Can every shipped kernel be timed the way a search times it (`autotune.bench.kernel_ms`: replayed from a CUDA
graph)? Each kernel's default config and torch baseline on its first preset (bf16): do_bench and graph times, or why
the capture failed. Then group_norm_backward's and mlp's small-problem configs timed three times each way: do_bench
times their host paths, kernel_ms their GPU work.

    python benchmarks/graph_capture_probe.py > benchmarks/results/graph-capture-GPU-DATE.txt   (GPU only)
"""

import json
import time
import warnings

import torch

from autotune.measure import bench
from autotune.runtime import registry
from autotune.gate.verify import ReferenceCache, outputs_like

DT = torch.bfloat16


def timed(label, call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = bench.graph_ms(call, rep_ms=50)
    d = bench.time_ms(call, rep_ms=50)
    why = "; ".join(str(w.message) for w in caught)
    print(f"{label}: do_bench {d*1000:.1f} us, graph {'FAILED ' + why if g is None else f'{g*1000:.1f} us'}", flush=True)


def main():
    for name in registry.shipped():
        spec = registry.get(name)
        problem = spec.problem_for(spec.presets[0], DT)
        t = time.time()
        inputs, base, _ = ReferenceCache().get(spec, problem, DT, 0)
        out = outputs_like(base, None)
        config = spec.space.default
        timed(f"{name} {json.dumps(problem.get('shape'))} default", lambda: spec.launch(inputs, config, out))
        timed(f"{name} {json.dumps(problem.get('shape'))} torch", lambda: spec.baseline(inputs))
        print(f"  ({time.time() - t:.0f} s)", flush=True)
    cases = [
        ("group_norm_backward", "2x1280x16x16,groups=32,activation=silu", [
            {"variant": "split", "BLOCK": 4096, "SPLIT": 2, "num_warps": 8, "num_stages": 1, "REDUCE": "partials"},
            {"variant": "single", "BLOCK": 16384, "SPLIT": 1, "num_warps": 16, "num_stages": 1, "REDUCE": "partials"},
            {"variant": "looped", "BLOCK": 4096, "SPLIT": 1, "num_warps": 16, "num_stages": 3, "REDUCE": "partials"},
            {"variant": "split", "BLOCK": 16384, "SPLIT": 4, "num_warps": 32, "num_stages": 1, "REDUCE": "atomic"}]),
        ("mlp", "4096x1024x2048x512,bias,gelu_tanh", [
            {"variant": "two_pass", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_H": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2},
            {"variant": "two_pass", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_H": 64, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}]),
    ]
    for name, shape, configs in cases:
        spec = registry.get(name)
        problem = spec.problem_for(spec.parse_shape(shape), DT)
        inputs, base, _ = ReferenceCache().get(spec, problem, DT, 0)
        out = outputs_like(base, None)
        for c in configs:
            reason = spec.space.rejects(c, problem)
            if reason:
                print(f"{name} {shape} {c}: rejected: {reason}", flush=True)
                continue
            call = lambda c=c: spec.launch(inputs, c, out)
            call(); torch.cuda.synchronize()
            d = [round(bench.time_ms(call, rep_ms=100, max_reps=300) * 1000, 1) for _ in range(3)]
            g = [round(bench.kernel_ms(call, rep_ms=100, max_reps=300) * 1000, 1) for _ in range(3)]
            print(f"{name} {shape} {c}: do_bench us {d}; kernel_ms us {g}", flush=True)


if __name__ == "__main__":
    main()
