"""One report from several `autotune bench --out` runs of one GPU: every row, each kernel's geometric means of
the same-run ratios (tuned against the default config, torch eager and torch.compile), and the plot.

    python benchmarks/combine_bench.py A.json B.json ... --out benchmarks/results/report-H100-DATE
        [--plot P.png] [--dtype bf16]

A row is measured in one run (its ratios are never formed across runs); where two runs measured the same
kernel, dtype, shape and bucket, the later file given wins. Runs of different GPUs, torch or Triton versions
are refused.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib

from autotune.measure import plot, report

RATIOS = ("vs default", "vs torch", "vs compile", "vs liger", "vs copy")


def merge(paths: list[str], dtype: str | None = None) -> dict:
    """The runs as one report: the last run's header (its timing method only where every run used it), each
    problem's records from the last run that has it (only dtype's, if given)."""
    runs = [json.loads(pathlib.Path(p).read_text()) for p in paths]
    for key in ("gpu", "torch", "triton"):
        if len({run[key] for run in runs}) > 1:
            raise SystemExit(f"the runs differ in {key}: {sorted({run[key] for run in runs})}")
    records: dict[tuple, list[dict]] = {}
    for run in runs:
        by_problem: dict[tuple, list[dict]] = {}
        for r in run["records"]:
            if dtype and r["dtype"] != dtype:
                continue
            by_problem.setdefault((r["kernel"], r.get("pass"), r["dtype"], r["shape"], r["bucket"]), []).append(r)
        records.update(by_problem)
    timings = {run.get("timing", "unrecorded") for run in runs}
    merged = {
        **runs[-1],
        "records": [r for rs in records.values() for r in rs],
        "skipped": [s for run in runs for s in run.get("skipped", [])],
        "timing": timings.pop() if len(timings) == 1 else 'each run\'s own, given under "Runs combined"',
        # a run that is itself a combination brings the runs it was made of
        "sources": [
            source
            for p, run in zip(paths, runs)
            for source in run.get("sources")
            or [{"file": pathlib.Path(p).name, "date": run["date"], "timing": run.get("timing", "unrecorded")}]
        ],
    }
    merged["rows"] = report.rows(merged)
    return merged


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows: list[dict]) -> list[dict]:
    """Per kernel and over all rows: how many rows, and the geometric mean of each ratio."""
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    groups = [(k, [r for r in rows if r["kernel"] == k]) for k in kernels] + [("all", rows)]
    return [
        {
            "kernel": name,
            "rows": len(group),
            **{f"geomean {ratio}": geomean([r.get(ratio) for r in group]) for ratio in RATIOS},
        }
        for name, group in groups
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="bench JSON files, oldest first")
    parser.add_argument("--out", required=True, help="writes OUT.md and OUT.json")
    parser.add_argument("--plot", help="also draw %% of peak per shape into this PNG")
    parser.add_argument("--dtype", help="only this dtype's rows (bf16, fp16, fp32)")
    args = parser.parse_args()

    merged = merge(args.runs, args.dtype)
    merged["summary"] = summary(merged["rows"])
    one_timing = len({s["timing"] for s in merged["sources"]}) == 1
    sources = "\n".join(
        f"- `{s['file']}` ({s['date']}{'' if one_timing else '; ' + s['timing']})" for s in merged["sources"]
    )
    text = (
        report.header(merged)
        + f"\n\nRuns combined (a later one wins where two measured the same problem):\n{sources}\n\n"
        + "Geometric means of the same-run ratios (above 1: tuned is faster):\n\n"
        + report.tabulated(merged["summary"])
        + "\n"
        + report.tabulated(merged["rows"])
        + report.notes(merged)
    )
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_name(out.name + ".json").write_text(json.dumps(merged, indent=1, default=str))
    out.with_name(out.name + ".md").write_text(text)
    if args.plot:
        plot.plot(merged, args.plot)
    print(text)


if __name__ == "__main__":
    main()
