"""Where the public call's time goes next to a bare launch with the same config: host time per call,
do_bench medians, and the kernels one public call runs.

    python benchmarks/public_vs_launch.py --kernel layer_norm --shape 8192x4096 --dtype bf16
"""

import argparse
import time

import torch
import triton

import autotune  # first: picks the Triton interpreter when there is no GPU
from autotune import gpu, runtime
from autotune.gate.compare import outputs_like
from autotune.spec import dtype_from_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", action="append", required=True)
    parser.add_argument("--shape", action="append", required=True, help="one per --kernel")
    parser.add_argument("--dtype", default="bf16")
    args = parser.parse_args()
    dtype = dtype_from_name(args.dtype)
    for name, text in zip(args.kernel, args.shape):
        spec = autotune.get(name)
        problem = spec.parse_shape(text)
        inputs = spec.make_inputs(problem, dtype, gpu.device(), 0)
        out = outputs_like(spec.baseline(inputs), None)
        config = runtime.tuned(spec).resolve(dtype, spec.bucket(problem), problem).config
        calls = {"public": lambda: spec.public(inputs), "launch": lambda: spec.launch(inputs, config, out)}
        for label, fn in calls.items():
            fn()
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(200):
                fn()
            host_us = (time.perf_counter() - started) / 200 * 1e6
            torch.cuda.synchronize()
            flushed = triton.testing.do_bench(fn, warmup=50, rep=300) * 1e3
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            graphed = triton.testing.do_bench(graph.replay, warmup=50, rep=300) * 1e3
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            kernels = [(e.name[:60], round(e.device_time, 1)) for e in prof.events() if e.device_time > 0]
            print(
                f"{name} {text} {label}: host {host_us:.1f} us/call (queued), do_bench {flushed:.1f} us, "
                f"CUDA graph {graphed:.1f} us, kernels {kernels}",
                flush=True,
            )


if __name__ == "__main__":
    main()
