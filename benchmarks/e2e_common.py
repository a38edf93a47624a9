"""What the end-to-end benchmarks share (e2e_decoder_layer.py, e2e_unet_block.py): timing the variants of one model
in one process, a per-op breakdown from torch.profiler (the GPU's kernel time, and on a GPU the time it waits for the
host between kernels), the goals table and the Markdown + JSON report.

Timing: `autotune.measure.bench.time_balanced`, the measurement of `autotune bench`: each variant runs once
(compiling), then all are timed by do_bench (CUDA events, L2 cleared before each call) in order and again in
reverse, --rounds times, and the medians averaged; with --graphs also replayed from a CUDA graph where the step can be
captured.
Under the Triton interpreter (the --smoke runs) they are wall-clock times of the CPU, not GPU timings."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from tabulate import tabulate
from torch.profiler import ProfilerActivity, profile

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune import gpu, runtime
from autotune.measure import bench, environment, report

TOP_OPS = 15
"""Ops listed per variant in the breakdown; the rest is summed in one line."""


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="writes OUT.md (tables) and OUT.json (every number)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes in float32 on this machine (the CPU under the Triton interpreter): a quick "
        "check that every variant runs, not a measurement",
    )
    parser.add_argument("--variants", help="comma-separated subset of the variants (default: all available)")
    parser.add_argument("--graphs", action="store_true", help="also time each step replayed from a CUDA graph")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="timing rounds, each every variant in order and then in reverse (default 3: a GPU at its power cap "
        "drifts by several percent within seconds)",
    )
    parser.add_argument("--no-breakdown", dest="breakdown", action="store_false", help="skip the torch.profiler pass")
    parser.add_argument("--profile-steps", type=int, default=5, help="steps profiled per variant (default 5)")
    parser.add_argument(
        "--compile-backend", default=None, help="torch.compile's backend (default inductor; 'eager' in --smoke runs)"
    )


def selected(available: list[str], requested: str | None) -> list[str]:
    if not requested:
        return available
    names = [n.strip() for n in requested.split(",") if n.strip()]
    unknown = [n for n in names if n not in available]
    if unknown:
        raise SystemExit(f"error: unknown variant(s) {unknown}; expected some of {available}")
    return names


def launched(step: Callable[[], object]) -> list[str]:
    """The tuned kernels one step launches, in order of first launch."""
    with runtime.record_launches() as launches:
        step()
    seen: dict[str, None] = {}
    for kernel, _ in launches:
        seen.setdefault(kernel)
    return list(seen)


def _profiled(step: Callable[[], object], steps: int, on_gpu: bool) -> profile:
    """torch.profiler over `steps` steps after one unprofiled step; the GPU's activity too where on_gpu."""
    step()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])) as prof:
        for _ in range(steps):
            step()
        if on_gpu:
            torch.cuda.synchronize()
    return prof


def breakdown(step: Callable[[], object], steps: int) -> list[dict]:
    """Where one step's time goes: the GPU kernels (on a GPU) or the ops' own CPU time (under the interpreter) of
    `steps` profiled steps, per step, largest first, the rest summed."""
    on_gpu = gpu.device().type == "cuda"
    prof = _profiled(step, steps, on_gpu)
    events = []
    for event in prof.key_averages():
        if on_gpu:
            us = event.self_device_time_total
            if event.device_type != torch.autograd.DeviceType.CUDA or not us:
                continue
        else:
            us = event.self_cpu_time_total
        events.append((event.key, event.count / steps, us / 1000 / steps))
    events.sort(key=lambda e: -e[2])
    total = sum(ms for _, _, ms in events) or 1.0
    rows = [{"op": name[:90], "calls": calls, "ms": ms, "share": ms / total} for name, calls, ms in events[:TOP_OPS]]
    rest = events[TOP_OPS:]
    if rest:
        rest_ms = sum(ms for _, _, ms in rest)
        rows.append(
            {
                "op": f"({len(rest)} other ops)",
                "calls": sum(c for _, c, _ in rest),
                "ms": rest_ms,
                "share": rest_ms / total,
            }
        )
    return rows


def waits_by_launcher(kernels: list[tuple[float, float, str]], steps: int, top: int = TOP_OPS) -> dict:
    """Where a step leaves the GPU idle, from its kernels' (start us, end us, the op that launched it) over `steps`
    profiled steps: per step, the span from the first kernel's start to the last one's end, the time some kernel ran
    (overlapping kernels counted once), and the idle time before each kernel summed by its launcher (the launch
    the GPU was waiting for: the host's time where the step is bound by it), largest first, the rest in one line."""
    kernels = sorted(kernels)
    busy = idle = 0.0
    by_launcher: dict[str, float] = {}
    end = kernels[0][0] if kernels else 0.0
    for start, stop, launcher in kernels:
        if start > end:
            idle += start - end
            by_launcher[launcher] = by_launcher.get(launcher, 0.0) + start - end
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    span = end - kernels[0][0] if kernels else 0.0
    ranked = sorted(by_launcher.items(), key=lambda item: -item[1])
    rows = [{"launcher": name, "ms": us / 1000 / steps, "share": us / idle} for name, us in ranked[:top]]
    if ranked[top:]:
        rest = sum(us for _, us in ranked[top:])
        rows.append(
            {"launcher": f"({len(ranked) - top} other launchers)", "ms": rest / 1000 / steps, "share": rest / idle}
        )
    return {
        "span_ms": span / 1000 / steps,
        "busy_ms": busy / 1000 / steps,
        "idle_ms": idle / 1000 / steps,
        "rows": rows,
    }


def waits(step: Callable[[], object], steps: int) -> dict | None:
    """`waits_by_launcher` of `steps` profiled steps on the GPU (None elsewhere: the interpreter launches nothing
    there). A kernel's launcher is the op its launch ran under: the outermost op of its thread (an autograd node on
    the backward's thread), then the innermost, as `outer > inner`."""
    if gpu.device().type != "cuda":
        return None
    events = _profiled(step, steps, on_gpu=True).profiler.kineto_results.events()
    cpu = torch.autograd.DeviceType.CPU
    ops = [e for e in events if e.device_type() == cpu and not e.name().startswith("cu")]  # not the runtime's calls
    by_id = {op.correlation_id(): op for op in ops}
    by_thread: dict[int, list] = {}
    for op in ops:
        by_thread.setdefault(op.start_thread_id(), []).append(op)

    def launcher(kernel) -> str:
        op = by_id.get(kernel.linked_correlation_id())
        if op is None:
            return "(no op recorded)"
        around = [
            e for e in by_thread[op.start_thread_id()] if e.start_ns() <= op.start_ns() and e.end_ns() >= op.end_ns()
        ]
        outer = min(around, key=lambda e: e.start_ns()).name()
        return outer if outer == op.name() else f"{outer} > {op.name()}"

    kernels = [
        (e.start_ns() / 1000, e.end_ns() / 1000, launcher(e))
        for e in events
        if e.device_type() == torch.autograd.DeviceType.CUDA and e.duration_ns() > 0
    ]
    return waits_by_launcher(kernels, steps)


def time_variants(steps: dict[str, Callable[[], object]], graphs: bool, rounds: int = 1) -> dict[str, dict]:
    """{variant: {"ms", "graph_ms"} or {"error"}}, timed in one process as `time_balanced` does."""
    timed = bench.time_balanced(steps, graphs and gpu.device().type == "cuda", rounds)
    out = {}
    for name in steps:
        result = timed[name]
        if isinstance(result, Exception):
            out[name] = {"error": f"{type(result).__name__}: {str(result).splitlines()[0] if str(result) else ''}"}
        else:
            out[name] = {"ms": result[0], "graph_ms": result[1]}
    return out


def differences(outputs: dict[str, Callable[[], torch.Tensor]], baseline: str) -> dict[str, float | str]:
    """Each variant's largest absolute difference from the baseline's output on the same inputs: a check that every
    variant computes the same model (bf16 and fp16 variants differ by their roundings)."""
    results: dict[str, torch.Tensor | str] = {}
    for name, fn in outputs.items():
        try:
            results[name] = fn().detach().float()
        except Exception as exc:
            results[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    base = results.get(baseline)
    return {
        name: out
        if isinstance(out, str)
        else float((out - base).abs().max())
        if isinstance(base, torch.Tensor)
        else "no baseline"
        for name, out in results.items()
    }


def speedups(times: dict[str, dict], of: str, over: str) -> float | None:
    a, b = times.get(of, {}).get("ms"), times.get(over, {}).get("ms")
    return None if a is None or b is None else b / a


NOTHING_ROUTED = (
    "judged on nothing: the variant launched no autotune kernel, so it ran its baseline's torch work and the ratio is "
    "the patch's own host cost and the timing's run-to-run noise"
)


def goals_table(
    times: dict[str, dict], goals: list[tuple[str, str, float]], kernels: dict[str, list[str]] | None = None
) -> list[dict]:
    """Each goal (variant, baseline, least speedup): the measured speedup of variant over baseline, and whether met;
    neither met nor unmet (a note why) where an autotune variant launched none of our kernels (`kernels`: what each
    variant launched) against a torch baseline: no kernel of ours was measured there."""
    rows = []
    for variant, baseline, least in goals:
        s = speedups(times, variant, baseline)
        row = {"goal": f"{variant} >= {least}x {baseline}", "speedup": s, "met": None if s is None else s >= least}
        if kernels is not None and kernels.get(variant) == [] and not kernels.get(baseline):
            row.update(met=None, note=NOTHING_ROUTED)
        rows.append(row)
    return rows


def markdown(
    title: str,
    env: dict,
    setup: list[str],
    times: dict[str, dict],
    baseline: str,
    goals: list[dict],
    kernels: dict[str, list[str]],
    differences: dict[str, float | str],
    patch_text: str,
    calls_text: str,
    breakdowns: dict[str, list[dict]],
    notes: list[str],
    waits: dict[str, dict | None] | None = None,
) -> str:
    lines = [f"# {title}", "", environment.probe_header(env, *setup), ""]
    if env.get("interpreter"):
        lines += ["**Smoke run under the Triton interpreter on the CPU: wall-clock times, not GPU timings.**", ""]
    base = times.get(baseline, {}).get("ms")
    rows = []
    for name, t in times.items():
        if "error" in t:
            rows.append((name, None, None, None, differences.get(name), t["error"]))
        else:
            rows.append(
                (
                    name,
                    t["ms"],
                    t.get("graph_ms"),
                    None if base is None else base / t["ms"],
                    differences.get(name),
                    ", ".join(kernels.get(name, [])) or "-",
                )
            )
    headers = (
        "variant",
        "ms",
        "graph ms",
        f"vs {baseline}",
        f"max abs diff vs {baseline}",
        "autotune kernels launched",
    )
    lines += [tabulate(rows, headers=headers, tablefmt="github", floatfmt=".4g"), ""]
    if goals:
        met = {None: "-", True: "met", False: "NOT met"}
        lines += [
            "## Goals",
            "",
            tabulate(
                [(g["goal"], g["speedup"], met[g["met"]], g.get("note", "")) for g in goals],
                headers=("goal", "speedup", "", ""),
                tablefmt="github",
                floatfmt=".3f",
            ),
            "",
        ]
    lines += [
        "## What autotune.patch did",
        "",
        "```",
        patch_text,
        "```",
        "",
        "How each call was routed:",
        "",
        calls_text,
        "",
    ]
    for name, rows_ in breakdowns.items():
        what = "GPU kernel time" if gpu.device().type == "cuda" else "self CPU time"
        lines += [
            f"## Breakdown: {name} ({what} per step)",
            "",
            tabulate(
                [(r["op"], r["calls"], r["ms"], 100 * r["share"]) for r in rows_],
                headers=("op", "calls", "ms", "%"),
                tablefmt="github",
                floatfmt=".4g",
            ),
            "",
        ]
    for name, w in (waits or {}).items():
        if w is None:
            continue
        lines += [
            f"## Where the GPU waits: {name}",
            "",
            f"Per step: kernels span {w['span_ms']:.4g} ms, run {w['busy_ms']:.4g} ms, the GPU idle "
            f"{w['idle_ms']:.4g} ms between them; the idle time before each kernel, by the op that launched it (the "
            "launch it waited for):",
            "",
            tabulate(
                [(r["launcher"], r["ms"], 100 * r["share"]) for r in w["rows"]],
                headers=("launched by", "idle ms", "%"),
                tablefmt="github",
                floatfmt=".4g",
            ),
            "",
        ]
    if notes:
        lines += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    return "\n".join(lines)


def data(
    env: dict,
    args: argparse.Namespace,
    times: dict,
    goals: list[dict],
    kernels: dict,
    differences: dict,
    patch_report,
    breakdowns: dict,
    notes: list[str],
    waits: dict | None = None,
) -> dict:
    """Everything the report shows, for OUT.json."""
    decisions = [
        {"call": d.kind, "dtype": d.dtype, "sizes": d.call, "routed": d.routed, "why": d.why}
        for d in autotune.nn.decisions()
    ]
    return {
        "env": env,
        "args": vars(args),
        "times": times,
        "goals": goals,
        "kernels": kernels,
        "differences": differences,
        "patch": [vars(c) for c in patch_report.changes],
        "decisions": decisions,
        "fallbacks": [{"call": k, "why": w, "calls": n} for (k, w), n in autotune.nn.fallbacks().items()],
        "breakdowns": breakdowns,
        "waits": waits or {},
        "notes": notes,
    }


def save(prefix: str, data: dict, text: str) -> None:
    path = report.save(prefix, data, text)
    print(text)
    print(f"\nwrote {path} and {path.with_suffix('.md')}")


def compiled(module: torch.nn.Module, backend: str | None) -> torch.nn.Module:
    return torch.compile(module, backend=backend or "inductor")
