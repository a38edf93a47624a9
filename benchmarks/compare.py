"""Same-run benchmark: tuned (what users call) vs the tuned config launched directly vs the default config vs
PyTorch eager vs torch.compile, and for kernels with a vendor library call (the matmul family: cuBLAS) vs that
call; each also replayed from a CUDA graph, and memory-bound kernels against a device copy of the same bytes.

    python benchmarks/compare.py --kernel softmax --kernel vector_add --out benchmarks/results/NAME
    python benchmarks/compare.py --kernel matmul --dtype bf16 --shape matmul=4096x4096x4096 --out NAME

Writes NAME.md (readable table) and NAME.json (one record per kernel, problem, dtype and implementation)
with the GPU name, versions and date. The measurement is autotune.report's (`autotune bench` runs it too):
medians of triton.testing.do_bench, random inputs, one process. Memory-bound kernels are reported in GB/s
against the copy bandwidth, compute-bound ones in TFLOP/s against the vendor library's rate measured in the
same run.
"""

from __future__ import annotations

import argparse

from autotune.measure import bench, report
from autotune.spec import dtype_from_name

IMPLS = ("tuned", "tuned-launch", "default", "torch", "compile", "vendor")


def run(todo: report.Plan) -> dict:
    """Every implementation on each case; then the copy bandwidth of the whole GPU and of each memory-bound
    problem's bytes."""
    result = report.measure(todo, IMPLS, graphs=True)
    copy_gbs = result["copy_bandwidth_gbs"] = bench.copy_bandwidth_gbs()
    same_size: dict[float, float | None] = {}
    for r in result["records"]:
        # The roofline at this size: a device copy moving the same bytes (small copies fall short of 3 TB/s too).
        if r["bound"] == "memory" and r["bytes"] not in same_size:
            same_size[r["bytes"]] = bench.copy_bandwidth_gbs(int(r["bytes"]))
        r["same_size_copy_gbs"] = same_size.get(r["bytes"]) if r["bound"] == "memory" else None
        r["pct_copy_bw"] = 100 * r["gbs"] / copy_gbs if copy_gbs and r.get("gbs") else None
    return result


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def table(result: dict) -> str:
    rows = report.rows(result)
    copies = {(r["kernel"], r["dtype"], r["shape"], r["bucket"]): r["same_size_copy_gbs"] for r in result["records"]}
    for row in rows:
        t = row.get("tuned ms")
        best = min((row[k] for k in ("torch ms", "compile ms") if row.get(k)), default=None)
        row["vs best of torch/compile"] = _ratio(best, t)
        row["launch-only vs best"] = _ratio(best, row.get("tuned-launch ms"))
        graphed = [row.get(f"{impl} graph ms") for impl in ("tuned", "torch", "compile")]
        if all(graphed):
            row["graphed vs compile"] = graphed[2] / graphed[0]
            row["graphed vs best"] = min(graphed[1:]) / graphed[0]
        if "vendor ms" in row:
            row["tuned % of vendor"] = 100 * (_ratio(row["vendor ms"], t) or 0)
        if row["unit"] == "GB/s" and row.get("tuned rate"):
            same = copies[(row["kernel"], row["dtype"], row["shape"], row["bucket"])]
            if result["copy_bandwidth_gbs"]:
                row["tuned % copy BW"] = 100 * row["tuned rate"] / result["copy_bandwidth_gbs"]
            if same:
                row["same-size copy GB/s"] = same
                row["tuned % same-size copy"] = 100 * row["tuned rate"] / same
    head = (
        report.header(result) + f"\nmeasured copy bandwidth {result['copy_bandwidth_gbs'] or 0:.0f} GB/s; "
        "vendor: the library call doing the same products (cuBLAS on NVIDIA GPUs: torch.matmul, F.linear without "
        "the activation, two F.linear for mlp)\n\n"
    )
    return head + report.tabulated(rows) + report.notes(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", action="append", default=None)
    parser.add_argument("--dtype", action="append", default=None)
    parser.add_argument("--shape", action="append", default=[], help="KERNEL=SHAPE, repeatable")
    parser.add_argument("--out", required=True, help="path prefix for .md and .json")
    args = parser.parse_args()
    kernels = args.kernel or ["vector_add", "softmax"]
    try:
        dtypes = [dtype_from_name(d) for d in (args.dtype or ["bf16", "fp16", "fp32"])]
        todo = report.plan(kernels, dtypes, report.shapes_by_kernel(args.shape, kernels), skip_unsupported=True)
    except ValueError as exc:
        parser.error(str(exc))
    result = run(todo)
    text = table(result)
    report.save(args.out, result, text)
    print(text)


if __name__ == "__main__":
    main()
