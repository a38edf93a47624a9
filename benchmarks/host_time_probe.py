"""Is a small GEMM call limited by the GPU or by the host? For mlp's small preset (8192x1024x4096x256 by
default) in bf16 and fp16: the public `mlp`, the spec's launch with the default config, each of its two
`linear` calls, and torch eager, each timed three ways in one run:

- do_bench: the median of `autotune.bench.time_ms` (L2 cleared), three times (what `autotune bench` reports);
- graph: replayed from a CUDA graph (`autotune.bench.graph_ms`), which removes the host's part;
- host: the host's time per call, 200 calls queued without a sync (Python, Triton's launcher, allocations).

Where host exceeds graph, the call is host-bound and do_bench times the host. Each row also lists the
configs that ran (`runtime.record_launches`).

    AUTOTUNE_DB=... python benchmarks/host_time_probe.py --out results/host-time-probe-GPU-DATE.md
"""

from __future__ import annotations

import argparse
import datetime
import time

import tabulate
import torch
import triton

from autotune import gpu, runtime
from autotune.measure import bench
from autotune.runtime import registry
from autotune.kernels.gemm.matmul import linear_rows
from autotune.gate.verify import outputs_like

HOST_CALLS = 200


def short(config: dict) -> str:
    tile = "x".join(str(config[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_H", "BLOCK_K") if k in config)
    return f"{config['variant']} {tile}"


def host_ms(fn) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(HOST_CALLS):
        fn()
    elapsed = time.perf_counter() - started
    torch.cuda.synchronize()
    return elapsed / HOST_CALLS * 1e3


def probe(shape: str, dtype: torch.dtype) -> list[dict]:
    spec = registry.get("mlp")
    problem = spec.problem_for(spec.parse_shape(shape), dtype)
    inputs = spec.make_inputs(problem, dtype, gpu.device(), 0)
    out = outputs_like(spec.baseline(inputs), None)
    x, w1, b1, w2, b2, act = (inputs[k] for k in ("x", "w1", "b1", "w2", "b2", "activation"))
    hidden = linear_rows(x, w1, b1, act, False)[0]
    calls = {
        "public mlp": lambda: spec.public(inputs),
        "launch, default config": lambda: spec.launch(inputs, dict(spec.space.default), out),
        "first linear": lambda: linear_rows(x, w1, b1, act, False),
        "second linear": lambda: linear_rows(hidden, w2, b2, "none", False),
        "torch eager": lambda: spec.baseline(inputs),
    }
    rows = []
    for name, fn in calls.items():
        with runtime.record_launches() as launches:
            fn()
        rows.append({"call": name, "host ms": host_ms(fn),
                     "do_bench ms (3 runs)": ", ".join(f"{bench.time_ms(fn):.4f}" for _ in range(3)),
                     "graph ms": bench.graph_ms(fn), "configs": "; ".join(f"{k}: {short(c)}" for k, c in launches)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="8192x1024x4096x256,bias,gelu_tanh", help="an mlp shape (MxKxHxN,...)")
    parser.add_argument("--out", help="write the report here as Markdown")
    args = parser.parse_args()
    lines = [f"GPU: {gpu.current_gpu().device_name}; torch {torch.__version__}; triton {triton.__version__}; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M}Z; mlp {args.shape}", ""]
    for dtype in (torch.bfloat16, torch.float16):
        lines += [f"## {dtype}", "", tabulate.tabulate(probe(args.shape, dtype), headers="keys", tablefmt="github",
                                                       floatfmt=".4f"), ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
