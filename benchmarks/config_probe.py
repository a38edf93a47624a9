"""What the Hopper probes share: each config runs in a child process of its own under a timeout (a config that
fails to compile, computes wrong, crashes or hangs is reported and the probe goes on), says what it did in JSON
lines (`emit`), and the probe reads its checks, times and status from them (`outcome`).

A child's records: {"kind": "check", "shape", "ok", "reason", ...}, {"kind": "time", "shape", ...} (with "what",
times are kept by shape and then by what was timed), {"kind": "kernels", "shape", "rows"} (a per-kernel breakdown),
{"kind": "unsupported", "reason"}, {"kind": "error", "stage", "error"}."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable

from autotune.measure import environment, report
from autotune.spec import dtype_from_name, shape_label


def emit(**record) -> None:
    """One record of a child, as a JSON line."""
    print(json.dumps(record, default=str), flush=True)


def describe(problem: dict) -> str:
    """A check problem in one phrase: its shape, and its layout, magnitude and scale where not the defaults."""
    extras = [
        f"{key} {problem[key]}"
        for key, plain in (("layout", "contiguous"), ("magnitude", 1.0), ("scale", None))
        if problem.get(key, plain) != plain
    ]
    return " ".join([shape_label(problem), *extras])


def run_config(script: str, config: dict, label: str, dtype_name: str, shapes: list[str], timeout: float) -> dict:
    """`script --child CONFIG --dtype D --shape S...` under timeout: the config's outcome, and its seconds."""
    command = [sys.executable, script, "--child", json.dumps(config), "--dtype", dtype_name]
    command += [arg for s in shapes for arg in ("--shape", s)]
    start = time.perf_counter()
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        result = outcome(config, label, run.stdout, run.stderr, run.returncode)
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        result = outcome(config, label, stdout, "", 0, f"timed out after {timeout:.0f} s (a hang?)")
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def outcome(config: dict, label: str, stdout: str, stderr: str, returncode: int, stopped: str | None = None) -> dict:
    """What a config's child said: its checks, its times by shape (and by what was timed, where it says), and a
    status: "ok", or each of: wrong on some checks (the first failure's shape and reason), unsupported, an
    error, the child's exit, `stopped` (a timeout)."""
    result = {"config": config, "label": label, "checks": [], "times": {}}
    said = []
    for record in _records(stdout):
        if record["kind"] == "check":
            result["checks"].append(record)
        elif record["kind"] == "time" and "what" in record:
            result["times"].setdefault(record["shape"], {})[record["what"]] = record
        elif record["kind"] == "time":
            result["times"][record["shape"]] = record
        elif record["kind"] == "kernels":
            result.setdefault("kernels", {})[record["shape"]] = record["rows"]
        elif record["kind"] == "unsupported":
            said.append(f"unsupported: {record['reason']}")
        else:
            said.append(f"error while {record['stage']}: {record['error']}")
    failed = [c for c in result["checks"] if not c["ok"]]
    if failed:
        first = failed[0]
        said.insert(
            0, f"wrong on {len(failed)} of {len(result['checks'])} checks, first {first['shape']}: {first['reason']}"
        )
    if returncode != 0:
        said.append(f"child exited with {returncode}: {stderr.strip()[-1500:]}")
    if stopped:
        said.append(stopped)
    result["status"] = "; ".join(said) or "ok"
    return result


def status_rows(configs: list[dict]) -> list[dict]:
    """The report's first table: each config's label, status, checks passed of checks, and seconds."""
    return [
        {"config": c["label"], "status": c["status"], "checks passed": sum(x["ok"] for x in c["checks"]),
         "checks": len(c["checks"]), "seconds": c["seconds"]}
        for c in configs
    ]  # fmt: skip


def _records(stdout: str) -> list[dict]:
    records = []
    for line in stdout.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # what else the child printed
            continue
    return records


def run_grid(
    result: dict,
    grid: list,
    unfit: Callable[[object], str | None],
    run: Callable[[object], dict],
    label: Callable[[object], str],
    text: Callable[[dict], str],
    out: str,
) -> None:
    """Each entry of grid that is not `unfit` run (its outcome appended to result["configs"]) and the report
    saved to OUT.md/.json after each, so that a probe cut short keeps what it measured; then printed."""
    for entry in grid:
        if (why := unfit(entry)) is not None:
            print(f"{label(entry)}: skipped, {why}", flush=True)
            continue
        done = run(entry)
        print(f"{done['label']}: {done['status'][:300]} ({done['seconds']} s)", flush=True)
        result["configs"].append(done)
        report.save(out, result, text(result))
    markdown = text(result)
    report.save(out, result, markdown)
    print(markdown)


def attention_main(probe, config_problem: Callable[[dict, int], str | None], timeout: float, **extra) -> None:
    """The command line of an attention probe. `probe` is its module: PRESETS, GRID, QUICK, child(config, dtype,
    presets), baselines(presets, dtype), label, text and run_config; `config_problem(config, head_dim)` says why
    a config cannot take a head dim; `extra` goes into the report as it is."""
    from autotune.kernels.attention import problems

    parser = argparse.ArgumentParser(description=probe.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="path prefix for .md and .json")
    parser.add_argument("--dtype", default="bf16", help="bf16 or fp16")
    parser.add_argument("--shape", action="append", default=[], help=f"a flash_attn shape (default {probe.PRESETS})")
    parser.add_argument("--config", action="append", default=[], help="a config as JSON (repeatable; default GRID)")
    parser.add_argument("--quick", action="store_true", help=f"only the first {len(probe.QUICK)} configs of GRID")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds per config's child process")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a config as JSON: run it in this process
    args = parser.parse_args()
    dtype = dtype_from_name(args.dtype)
    shapes = args.shape or list(probe.PRESETS)
    presets = [problems.parse_shape(s) for s in shapes]
    if args.child:
        probe.child(json.loads(args.child), dtype, presets)
        return
    if not args.out:
        parser.error("--out is required")
    grid = [json.loads(c) for c in args.config] or (probe.QUICK if args.quick else probe.GRID)
    print(f"baselines on {len(presets)} shapes...", flush=True)
    result = {
        "environment": environment.environment(),
        "dtype": args.dtype,
        "presets": presets,
        **extra,
        "baselines": probe.baselines(presets, dtype),
        "configs": [],
    }
    head_dims = sorted({p["head_dim"] for p in presets})

    def unfit(config: dict) -> str | None:  # tiles that fit no preset's head dim
        reasons = [config_problem(config, d) for d in head_dims]
        return reasons[0] if all(reasons) else None

    def run(config: dict) -> dict:
        return probe.run_config(config, args.dtype, shapes, args.timeout)

    run_grid(result, grid, unfit, run, probe.label, probe.text, args.out)
