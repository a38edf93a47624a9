"""Same-run benchmark: tuned (what users call) vs the default config vs PyTorch eager vs torch.compile, and
for kernels with a vendor library call (the matmul family: cuBLAS) vs that call.

    python benchmarks/compare.py --kernel softmax --kernel vector_add --out benchmarks/results/NAME
    python benchmarks/compare.py --kernel matmul --dtype bf16 --shape matmul=4096x4096x4096 --out NAME

Writes NAME.md (readable table) and NAME.json (one record per kernel, problem, dtype and implementation)
with the GPU name, versions and date. Medians of triton.testing.do_bench, random inputs, one process.
Memory-bound kernels are reported in GB/s against the copy bandwidth, compute-bound ones in TFLOP/s
against the vendor library's rate measured in the same run.
"""

from __future__ import annotations

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
import argparse
import datetime
import json
import pathlib
import platform

import torch
import triton
from tabulate import tabulate


from autotune import bench, gpu, runtime
from autotune.spec import DTYPE_NAMES, dtype_from_name, shape_label
from autotune.verify import outputs_like



def _compiled_baseline(spec):
    # One static-shape graph per problem is torch.compile at its best; lift dynamo's limit of 8
    # recompiles, past which it would silently run eager.
    torch._dynamo.config.recompile_limit = 1024
    return torch.compile(spec.baseline, dynamic=False)


def graph_ms(fn) -> float | None:
    """fn's median time replayed from a CUDA graph (the L2 still flushed before each replay): the GPU
    time without the host's, which do_bench counts wherever a call's host path outlasts the flush."""
    if not torch.cuda.is_available():
        return None
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return bench.time_ms(graph.replay, warmup_ms=25, rep_ms=200)
    except Exception as exc:  # a baseline that cannot be captured gets no graph time, and says why
        print(f"no CUDA graph time: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return None


def run(kernels: list[str], dtypes: list[torch.dtype], shapes: dict[str, list[str]]) -> dict:
    info = gpu.current_gpu()
    copy_gbs = bench.copy_bandwidth_gbs()
    records = []
    for name in kernels:
        spec = autotune.get(name)
        problems = [spec.parse_shape(s) for s in shapes.get(name, [])] or list(spec.presets_here())
        compiled = _compiled_baseline(spec)
        for dtype in dtypes:
            for problem in problems:
                problem = spec.problem_for(problem, dtype)
                inputs = spec.make_inputs(problem, dtype, gpu.device(), 0)
                out = outputs_like(spec.baseline(inputs), None)
                default = dict(spec.space.default)
                bucket = spec.bucket(problem)
                choice = runtime.tuned(spec).resolve(dtype, bucket, problem)
                tuned = choice.config
                impls = {
                    "tuned": lambda: spec.public(inputs),
                    "tuned-launch": lambda: spec.launch(inputs, tuned, out),
                    "default": lambda: spec.launch(inputs, default, out),
                    "torch": lambda: spec.baseline(inputs),
                    "compile": lambda: compiled(inputs),
                }
                if spec.vendor is not None:
                    impls["vendor"] = lambda: spec.vendor(inputs)
                cost = spec.cost(problem, dtype)
                # The roofline at this size: a device copy moving the same bytes (small copies fall short of 3 TB/s too).
                same_size_copy = bench.copy_bandwidth_gbs(int(cost.bytes)) if spec.bound == "memory" else None
                for impl, fn in impls.items():
                    fn()  # compile (Triton or Inductor) before timing starts
                    torch.cuda.synchronize() if torch.cuda.is_available() else None
                    ms = bench.time_ms(fn, warmup_ms=50, rep_ms=300)
                    graphed = graph_ms(fn)
                    r = bench.rate(cost, ms, bound=spec.bound, dtype_name=DTYPE_NAMES[dtype], info=info)
                    records.append(
                        {
                            "kernel": name, "problem": problem, "shape": shape_label(problem), "bucket": bucket,
                            "bound": spec.bound, "dtype": DTYPE_NAMES[dtype], "impl": impl, "median_ms": ms,
                            "graph_ms": graphed, "gbs": r.gbs, "tflops": r.tflops,
                            "pct_copy_bw": 100 * r.gbs / copy_gbs if copy_gbs else None,
                            "same_size_copy_gbs": same_size_copy,
                            "config": json.dumps(default if impl == "default" else tuned) if impl in ("tuned", "tuned-launch", "default") else None,
                            "config_source": choice.source if impl.startswith("tuned") else None,
                        }
                    )
    return {
        "gpu": info.name, "device_name": info.device_name, "torch": torch.__version__, "triton": triton.__version__,
        "autotune": autotune.__version__, "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "copy_bandwidth_gbs": copy_gbs, "interpreter": info.is_interpreter, "records": records,
    }


def table(report: dict) -> str:
    rows = {}
    for r in report["records"]:
        # The bucket tells apart problems of one shape (a residual or not, a layout).
        key = (r["kernel"], r["dtype"], r["shape"], r.get("bucket"))
        row = rows.setdefault(key, {"kernel": r["kernel"], "dtype": r["dtype"], "shape": r["shape"], "bucket": r.get("bucket")})
        row[f"{r['impl']} ms"] = r["median_ms"]
        if r.get("graph_ms") and r["impl"] in ("tuned", "torch", "compile"):
            row[f"{r['impl']} graph ms"] = r["graph_ms"]
        if r.get("bound") == "compute":
            row[f"{r['impl']} TFLOP/s"] = r["tflops"]
        elif r["impl"] != "tuned-launch":
            row[f"{r['impl']} GB/s"] = r["gbs"]
        if r["impl"] == "tuned":
            row["config from"] = r["config_source"]
            if r.get("same_size_copy_gbs"):
                row["same-size copy GB/s"] = r["same_size_copy_gbs"]
    out = []
    for row in rows.values():
        t = row["tuned ms"]
        row["vs default"] = row["default ms"] / t
        row["vs torch"] = row["torch ms"] / t
        row["vs compile"] = row["compile ms"] / t
        row["vs best of torch/compile"] = min(row["torch ms"], row["compile ms"]) / t
        row["launch-only vs best"] = min(row["torch ms"], row["compile ms"]) / row["tuned-launch ms"]
        if all(row.get(f"{impl} graph ms") for impl in ("tuned", "torch", "compile")):
            row["graphed vs compile"] = row["compile graph ms"] / row["tuned graph ms"]
            row["graphed vs best"] = min(row["torch graph ms"], row["compile graph ms"]) / row["tuned graph ms"]
        if "vendor ms" in row:
            row["tuned % of vendor"] = 100 * row["vendor ms"] / t
        if report["copy_bandwidth_gbs"] and "tuned GB/s" in row:
            row["tuned % copy BW"] = 100 * row["tuned GB/s"] / report["copy_bandwidth_gbs"]
        if row.get("same-size copy GB/s"):
            row["tuned % same-size copy"] = 100 * row["tuned GB/s"] / row["same-size copy GB/s"]
        out.append(row)
    head = (
        f"GPU: {report['gpu']} ({report['device_name']}); torch {report['torch']}; triton {report['triton']}; "
        f"date {report['date']}; measured copy bandwidth {report['copy_bandwidth_gbs'] or 0:.0f} GB/s; "
        "vendor: the library call doing the same products (cuBLAS on NVIDIA GPUs: torch.matmul, F.linear without "
        "the activation, two F.linear for mlp)\n\n"
    )
    return head + tabulate(out, headers="keys", floatfmt=".4g", tablefmt="github") + "\n"


def write(prefix: str, report: dict, text: str) -> None:
    """The report as PREFIX.json, its table as PREFIX.md, and the table printed."""
    out = pathlib.Path(prefix)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", action="append", default=None)
    parser.add_argument("--dtype", action="append", default=None)
    parser.add_argument("--shape", action="append", default=[], help="KERNEL=SHAPE, repeatable")
    parser.add_argument("--out", required=True, help="path prefix for .md and .json")
    args = parser.parse_args()
    shapes: dict[str, list[str]] = {}
    for item in args.shape:
        k, _, s = item.partition("=")
        shapes.setdefault(k, []).append(s)
    dtypes = [dtype_from_name(d) for d in (args.dtype or ["bf16", "fp16", "fp32"])]
    report = run(args.kernel or ["vector_add", "softmax"], dtypes, shapes)
    write(args.out, report, table(report))


if __name__ == "__main__":
    main()
