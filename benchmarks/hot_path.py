"""Hot-path cost of a tuned call: the public function against launching the same config directly, for shipped
kernels and for a kernel of one's own under @autotune.tune (vector_add's Triton kernel behind the decorator).

    python benchmarks/hot_path.py --out benchmarks/results/NAME

Host time per call over many calls of a small problem (the GPU work is tiny, so host cost dominates),
both paths allocating their output the same way. The difference is what autotune adds: argument
checks, the bucket key and the config lookup. The lookup alone is timed too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import statistics
import time
import types

import torch
import triton

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
import autotune.kernels
import autotune.kernels.fused_softmax.softmax as fused_softmax
import autotune.kernels.vector_add.add as vector_add
from autotune import gpu, runtime


@autotune.tune(
    args={"x": autotune.Tensor("n"), "y": autotune.Tensor("n")},
    reference=lambda x, y: x + y,
    configs=[triton.Config({"BLOCK_SIZE": 1024}, num_warps=4, num_stages=2)],
    name="hot_path_add",
)
def decorated_add(x, y, *, config):
    """x + y through the decorator: the shipped add's allocation and launch, with the decorator's lookup."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    return vector_add.launch({"x": x, "y": y}, config, out)


DECORATED = types.SimpleNamespace(SPEC=decorated_add.spec, launch=vector_add.launch)
"""The decorated add as `measure` takes a kernel: its spec and the launch its config goes to."""


def per_call_samples_us(fn, calls: int = 20000, repeats: int = 7) -> list[float]:
    """The mean host time per call of each of `repeats` runs of `calls` calls, after 200 warm-up calls
    (synchronizing once per run)."""
    for _ in range(200):
        fn()
    sync = torch.cuda.synchronize if gpu.device().type == "cuda" else (lambda: None)
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return samples


def per_call_us(fn, calls: int = 20000, repeats: int = 7) -> float:
    """Median over repeats of the mean host time per call (synchronizing once per repeat)."""
    return statistics.median(per_call_samples_us(fn, calls, repeats))


def measure(calls: int) -> list[dict]:
    dev = gpu.device()
    rows = []
    x = torch.randn(4096, device=dev, dtype=torch.float16)
    y = torch.randn(4096, device=dev, dtype=torch.float16)
    s = torch.randn(8, 256, device=dev, dtype=torch.float16)
    cases = [
        (
            "vector_add",
            vector_add,
            lambda: autotune.kernels.add(x, y),
            {"x": x, "y": y},
            x,
            "n=4096",
            {"shape": [4096]},
        ),
        (
            "softmax",
            fused_softmax,
            lambda: autotune.kernels.softmax(s, -1),
            {"x": s, "dim": -1},
            s,
            fused_softmax.bucket({"shape": [8, 256], "dim": -1}),
            {"shape": [8, 256], "dim": -1},
        ),
        (
            "@autotune.tune add",
            DECORATED,
            lambda: decorated_add(x, y),
            {"x": x, "y": y},
            x,
            "n=4096",
            {"sizes": {"n": 4096}, "magnitude": 1.0},
        ),
    ]
    for name, module, public, inputs, like, bucket, problem in cases:
        table = runtime.tuned(module.SPEC)
        config = table.resolve(like.dtype, bucket, problem).config

        def direct():
            return module.launch(inputs, config, torch.empty_like(like, memory_format=torch.contiguous_format))

        public_us = per_call_us(public, calls)
        direct_us = per_call_us(direct, calls)
        key = {"vector_add": like.numel(), "@autotune.tune add": (x.shape, y.shape)}.get(
            name, tuple(like.reshape(-1, like.shape[-1]).shape)
        )
        lookup_us = per_call_us(lambda: table.lookup(like.dtype, key, lambda: bucket, lambda: problem), calls * 5)
        rows.append(
            {
                "kernel": name,
                "public_us": public_us,
                "direct_launch_us": direct_us,
                "overhead_us": public_us - direct_us,
                "lookup_only_us": lookup_us,
                "config": config,
            }
        )
    return rows


def wrapper_only(calls: int) -> list[dict]:
    """Host cost autotune adds, with the Triton launch itself replaced by a no-op in both paths:
    public function (checks, bucket key, lookup, allocation) against the no-op called directly with the
    same allocation. Interleaved repeats, so drift hits both alike."""
    dev = gpu.device()
    x = torch.randn(4096, device=dev, dtype=torch.float16)
    s = torch.randn(8, 256, device=dev, dtype=torch.float16)
    rows = []
    saved = (vector_add.launch, fused_softmax._launch)
    vector_add.launch = lambda inputs, config, out: out
    fused_softmax._launch = lambda *args: None
    try:
        cases = [
            (
                "vector_add",
                lambda: autotune.kernels.add(x, x),
                lambda: vector_add.launch(
                    {"x": x, "y": x}, None, torch.empty_like(x, memory_format=torch.contiguous_format)
                ),
            ),
            (
                "softmax",
                lambda: autotune.kernels.softmax(s, -1),
                lambda: fused_softmax._launch(
                    s, torch.empty_like(s, memory_format=torch.contiguous_format), 8, 256, (256, 1), (256, 1), None
                ),
            ),
            (
                "@autotune.tune add",
                lambda: decorated_add(x, x),
                lambda: vector_add.launch(
                    {"x": x, "y": x}, None, torch.empty_like(x, memory_format=torch.contiguous_format)
                ),
            ),
        ]
        for name, public, direct in cases:
            pub, dire = [], []
            for _ in range(7):
                pub.append(per_call_us(public, calls, repeats=1))
                dire.append(per_call_us(direct, calls, repeats=1))
            p, d = statistics.median(pub), statistics.median(dire)
            rows.append({"kernel": name, "public_noop_us": p, "direct_noop_us": d, "overhead_us": p - d})
    finally:
        vector_add.launch, fused_softmax._launch = saved
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    info = gpu.current_gpu()
    report = {
        "gpu": info.name,
        "device_name": info.device_name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "rows": measure(args.calls) if gpu.device().type == "cuda" else [],
        "wrapper_only": wrapper_only(args.calls),
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    for r in report["wrapper_only"]:
        print(
            f"{r['kernel']}: autotune's host cost per call {r['overhead_us']:.2f} us "
            f"(public {r['public_noop_us']:.2f} us vs direct {r['direct_noop_us']:.2f} us, launch stubbed out)"
        )
    for r in report["rows"]:
        print(
            f"{r['kernel']}: public {r['public_us']:.2f} us/call, direct launch {r['direct_launch_us']:.2f} us/call, "
            f"overhead {r['overhead_us']:.2f} us, lookup alone {r['lookup_only_us']:.3f} us"
        )


if __name__ == "__main__":
    main()
