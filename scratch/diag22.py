"""Why an off-bucket record's final times run 2-4x above its search's: the same configs timed in a fresh process,
with an idle compile pool up, and after an exact search in this process (as off_bucket.py does)."""
import autotune  # noqa: F401  (first)
import json, os, statistics, sys, time
import torch
from autotune import bench, offbucket, registry
from autotune.precompile import CompilePool, default_workers
from autotune.verify import ReferenceCache, outputs_like

DT = torch.bfloat16
CASES = [
    ("group_norm_backward", "2x1280x16x16,groups=32,activation=silu", {
        "runtime": {"variant": "split", "BLOCK": 4096, "SPLIT": 2, "num_warps": 8, "num_stages": 1, "REDUCE": "partials"},
        "exact": {"variant": "single", "BLOCK": 16384, "SPLIT": 1, "num_warps": 16, "num_stages": 1, "REDUCE": "partials"}}),
    ("mlp", "4096x1024x2048x512,bias,gelu_tanh", {
        "two_pass": {"variant": "two_pass", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_H": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}}),
]


def host_us(call, n=200):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n):
        call()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return round(host, 1)


def probe(label):
    for k, shape, configs in CASES:
        spec = registry.get(k)
        problem = spec.problem_for(spec.parse_shape(shape), DT)
        inputs, base, _ = ReferenceCache().get(spec, problem, DT, 0)
        out = outputs_like(base, None)
        for name, c in configs.items():
            call = lambda c=c: spec.launch(inputs, c, out)
            call(); torch.cuda.synchronize()
            t = [round(bench.time_ms(call, **offbucket.TIMING) * 1000, 1) for _ in range(3)]
            g = bench.graph_ms(call)
            print(f"{label:>14} {k} {shape} {name}: time_ms us {t}; graph us {None if g is None else round(g*1000, 1)}; "
                  f"host us/call {host_us(call)}; load {os.getloadavg()[0]:.1f}", flush=True)


def main():
    probe("fresh")
    with CompilePool(default_workers()) as pool:
        probe("pool idle")
        spec = registry.get("group_norm_backward")
        t0 = time.time()
        [r] = offbucket.measure_off_bucket(spec, [spec.parse_shape(CASES[0][1])], DT, trials=10, timeout=15,
                                           final_examples=30, compile_workers=pool)
        print("search", round(time.time() - t0), {k: r[k] for k in ("search_best_ms", "runtime_ms", "exact_ms", "default_ms")},
              json.dumps(r["exact_config"]), flush=True)
        probe("after search")
    probe("pool closed")


if __name__ == "__main__":
    main()
