"""Probe of the Gluon attention backward (autotune/kernels/attention/hopper_backward.py) on a Hopper GPU: each config
of a small grid checked against flash_attn_backward's float64 reference with the gate's comparison (dq, dk, dv),
then timed on the presets, the backward alone and forward + backward (the Gluon forward at its default config, then
this backward), against sdpa's flash, cuDNN and default backends and flash_attn (its shipped rows), one run; and
the best config's backward split by GPU kernel (torch.profiler): where a faster backward has to come from.

    python benchmarks/hopper_attention_backward_probe.py --out benchmarks/results/H100/hopper-attention-backward-probe

Writes OUT.md and OUT.json. Each config runs in a child process of its own under --timeout seconds, so a config
that fails to compile, computes wrong, crashes or hangs is reported and the probe goes on. Times are medians of
CUDA-graph replays (autotune.measure.bench.kernel_time); TFLOP/s as FlashAttention counts them: the forward
4*B*H*Nq*Nk*D (half when causal), the backward 2.5x that, forward + backward 3.5x. The peers' forward + backward
is a training step through autograd (autotune.measure.peers.training_step). A wrong config is still timed (marked
"wrong"), but never counted as the best.
"""

from __future__ import annotations

import json
import sys
import traceback

import config_probe
import e2e_common
import torch
from config_probe import describe, emit
from tabulate import tabulate

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune.gate.compare import compare_outputs
from autotune.kernels import flash_attn
from autotune.kernels.attention import hopper_backward, hopper_forward
from autotune.kernels.attention import problems as problems_
from autotune.measure import bench, environment
from autotune.measure.attention_peers import sdpa_call
from autotune.measure.peers import PeerUnavailable, training_step
from autotune.spec import shape_label

PRESETS = ("4x16x4096x128", "4x16x4096x128+causal", "16x16x1024x128", "4x32x4096x64")
PEERS = ("sdpa-cudnn", "sdpa-flash", "sdpa-default")
EDGE_CHECKS = (
    problems_.problem(1, 4, 1, 128, kv_heads=2, nk=300),  # one query, GQA
    problems_.problem(2, 4, 77, 64, kv_heads=1, nk=5, causal=True),  # fewer keys than a block, Nq > Nk
    problems_.problem(1, 2, 500, 128, nk=70, causal=True),
    problems_.problem(1, 2, 129, 64, nk=1000, causal=True, magnitude=problems_.BACKWARD_LARGE),  # Nq < Nk
    problems_.problem(1, 2, 300, 128, nk=301, magnitude=0.01, layout="bnhd"),  # near-uniform, transposed
    problems_.problem(1, 2, 200, 64, nk=190, scale=0.3, layout="padded"),
    # One query over a thousand keys of small logits: dS rounded to bfloat16 fails the gate here on the H100 for
    # flash_attn_backward (its ds="split" passes); SPLIT_DS is this kernel's answer.
    problems_.problem(1, 2, 1, 64, nk=1021, magnitude=0.01),
    problems_.problem(1, 2, 1, 128, nk=1021, magnitude=0.01),
)
"""Checked besides each preset (at batch 1) and its bucket's edges (lengths up to 2k)."""
BASE = dict(hopper_backward.DEFAULT_CONFIG)
GRID = [
    BASE,
    {**BASE, "DQ": "combined"},
    {**BASE, "DQ": "separate"},
    {**BASE, "DQ": "combined", "NUM_STAGES": 3},
    {**BASE, "DQ": "combined", "SPLIT_DS": True},
    {**BASE, "BLOCK_M": 128, "DQ": "combined"},
    {**BASE, "DQ": "separate", "PINGPONG": True},
    {**BASE, "DQ": "combined", "PINGPONG": True},
    {**BASE, "PINGPONG": True},
]
"""FlashAttention-3's shape (two consumers of 64 keys, 64-query blocks, dQ by TMA reduce-add) and its neighbours:
the consumers' dQ combined before one add (and with it a third stage), dQ by its own pass, dS split, 128-query
blocks (head dim 64 only: at 128 their tiles exceed the shared memory), and the two consumers taking turns issuing
their wgmmas (PINGPONG) with each dQ. EARLY_DP is left to --config (it spills more at head dim 128). A config whose
tiles do not fit a head dim is skipped at it. About half a minute each (compiles, checks, timings), by estimate."""
QUICK = GRID[:3]
KERNEL_STEPS = 5
"""Backward calls profiled per preset for the per-kernel breakdown."""
FORWARD_CONFIG = dict(hopper_forward.DEFAULT_CONFIG)
"""The Gluon forward's config in forward + backward."""


def label(config: dict) -> str:
    return (
        f"m{config['BLOCK_M']}n{config['BLOCK_N']}s{config['NUM_STAGES']}c{config['NUM_CONSUMERS']}"
        f"r{config['CONSUMER_REGISTERS']}-{config['DQ']}{'-split' if config['SPLIT_DS'] else ''}"
        f"{'-earlydp' if config['EARLY_DP'] else ''}{'-pingpong' if config['PINGPONG'] else ''}"
    )


def checks(presets: list[dict]) -> list[dict]:
    """The problems each config is checked on: the presets at batch 1, their buckets' edges, EDGE_CHECKS."""
    out = []
    for p in presets:
        out.append({**p, "batch": 1})
        small = problems_.problem(
            1, p["heads"], min(p["nq"], 2048), p["head_dim"], kv_heads=p["kv_heads"], nk=min(p["nk"], 2048),
            causal=p["causal"],
        )  # fmt: skip
        out += problems_.bucket_edges(small, large=problems_.BACKWARD_LARGE)
    out += [e for e in EDGE_CHECKS if e["head_dim"] in {p["head_dim"] for p in presets}]
    unique = {json.dumps(p, sort_keys=True): p for p in out}
    return list(unique.values())


def _inputs(problem: dict, dtype: torch.dtype) -> dict:
    """flash_attn_backward's inputs: q, k, v, dO, and the output and log-sum-exp from float64, rounded."""
    return autotune.get("flash_attn_backward").make_inputs(problem, dtype, autotune.gpu.device(), 0)


def _fits(config: dict, problem: dict) -> bool:
    return hopper_backward.config_problem(config, problem["head_dim"]) is None


def child(config: dict, dtype: torch.dtype, presets: list[dict]) -> None:
    """One config: every check problem (stops at a call it does not support), then every preset timed, the
    backward alone and forward + backward; JSON lines."""
    spec = autotune.get("flash_attn_backward")
    stage = "checking"
    try:
        for problem in checks(presets):
            if not _fits(config, problem):
                continue
            i = _inputs(problem, dtype)
            try:  # copies what TMA cannot address (the transposed and padded layouts), refuses what it cannot run
                out = hopper_backward.hopper_attention_backward(
                    i["do"], i["q"], i["k"], i["v"], i["o"], i["lse"], i["is_causal"], i["scale"], config
                )
            except ValueError as exc:
                emit(kind="unsupported", reason=str(exc).removeprefix("hopper_attention_backward: "))
                return
            if out[0].is_cuda:
                torch.cuda.synchronize()  # a fault surfaces here, as this check's
            floor = spec.error_floor(i) if spec.error_floor else None  # as the gate has it
            err, budget, failure = compare_outputs(out, spec.reference(i), spec.baseline(i), floor)
            emit(kind="check", shape=describe(problem), problem=problem, ok=failure is None, error=err,
                  budget=budget, reason=failure)  # fmt: skip
        stage = "timing"
        for problem in presets:
            if not _fits(config, problem):
                continue
            i = _inputs(problem, dtype)
            q, k, v, do, causal, scale = i["q"], i["k"], i["v"], i["do"], i["is_causal"], i["scale"]
            o, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

            def backward():
                hopper_backward.launch(do, q, k, v, o, lse, dq, dk, dv, causal, scale, config)

            def training():
                hopper_forward.launch(q, k, v, o, lse, causal, scale, FORWARD_CONFIG)
                backward()

            training()  # o and lse, for the backward alone
            flops = problems_.forward_cost(problem, dtype).flops
            for name, call, factor in (("backward", backward, 2.5), ("forward+backward", training, 3.5)):
                ms, method = bench.kernel_time(call, warmup_ms=25, rep_ms=200)
                emit(kind="time", shape=shape_label(problem), what=name, ms=ms, method=method,
                      tflops=factor * flops / ms / 1e9)  # fmt: skip
            # Where the backward's time goes: each GPU kernel's (the preprocess, dK/dV, the dQ pass, copies).
            emit(kind="kernels", shape=shape_label(problem), rows=e2e_common.breakdown(backward, KERNEL_STEPS))
    except Exception as exc:
        emit(kind="error", stage=stage, error="".join(traceback.format_exception(exc, limit=-3))[-3000:])


def run_config(config: dict, dtype_name: str, shapes: list[str], timeout: float) -> dict:
    """config's child process, under timeout: its checks, times, and what stopped it, if anything."""
    return config_probe.run_config(__file__, config, label(config), dtype_name, shapes, timeout)


def outcome(config: dict, stdout: str, stderr: str, returncode: int, stopped: str | None = None) -> dict:
    """What config's child said (config_probe.outcome)."""
    return config_probe.outcome(config, label(config), stdout, stderr, returncode, stopped)


def baselines(presets: list[dict], dtype: torch.dtype) -> dict:
    """Forward + backward TFLOP/s of flash_attn (its rows for this GPU) and each sdpa peer on each preset, or why
    there is none."""
    out = {}
    for problem in presets:
        inputs = autotune.get("flash_attn").make_inputs(problem, dtype, autotune.gpu.device(), 0)
        flops = 3.5 * problems_.forward_cost(problem, dtype).flops
        calls = {
            "flash_attn": training_step(
                lambda i: flash_attn(i["q"], i["k"], i["v"], is_causal=i["is_causal"], scale=i["scale"],
                                     enable_gqa=i["enable_gqa"]),
                inputs,
            )
        }  # fmt: skip
        for peer in PEERS:
            try:
                calls[peer] = sdpa_call(peer, inputs, backward=True)
            except PeerUnavailable as exc:
                calls[peer] = str(exc)
        row = {}
        for name, call in calls.items():
            if isinstance(call, str):
                row[name] = {"unsupported": call}
                continue
            try:
                ms, method = bench.kernel_time(call, warmup_ms=25, rep_ms=200)
                row[name] = {"ms": ms, "method": method, "tflops": flops / ms / 1e9}
            except Exception as exc:
                row[name] = {"error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}
        out[shape_label(problem)] = row
    return out


def _tflops(config: dict, shape: str, what: str) -> float | None:
    return config["times"].get(shape, {}).get(what, {}).get("tflops")


def text(result: dict) -> str:
    """The markdown: where it ran, each config's status, forward + backward TFLOP/s per preset against the peers,
    the best correct config's ratios, and each config's forward + backward / backward-alone TFLOP/s."""
    shapes = [shape_label(p) for p in result["presets"]]
    configs = result["configs"]
    status = config_probe.status_rows(configs)
    rows = []
    for shape in shapes:
        base = result["baselines"].get(shape, {})
        row = {"shape": shape}
        for name in ("flash_attn", *PEERS):
            row[name] = base.get(name, {}).get("tflops")
        correct = [
            (_tflops(c, shape, "forward+backward"), c["label"])
            for c in configs
            if c["status"] == "ok" and _tflops(c, shape, "forward+backward")
        ]
        best, best_label = max(correct) if correct else (None, None)
        row.update({"best gluon": best, "best config": best_label})
        for name in ("sdpa-cudnn", "sdpa-flash"):
            row[f"x {name}"] = best / row[name] if best and row[name] else None
        for c in configs:
            both, alone = _tflops(c, shape, "forward+backward"), _tflops(c, shape, "backward")
            mark = "" if c["status"] == "ok" else " wrong"
            row[c["label"]] = None if both is None else f"{both:.0f} / {alone:.0f}{mark}"
        rows.append(row)
    missing = sorted(
        {
            f"{name} at {s}: {v.get('unsupported') or v.get('error')}"
            for s, b in result["baselines"].items()
            for name, v in b.items()
            if "tflops" not in v
        }
    )
    kernels = []
    for row in rows:
        best = next((c for c in configs if c["label"] == row["best config"]), None)
        for k in (best or {}).get("kernels", {}).get(row["shape"], []):
            kernels.append({"shape": row["shape"], "config": best["label"], "kernel": k["op"], "calls": k["calls"],
                            "ms": k["ms"], "share": k["share"]})  # fmt: skip
    return (
        "\n\n".join(
            [
                "# Gluon attention backward (hopper_backward.py): configs checked and timed",
                environment.probe_header(
                    result["environment"],
                    f"dtype {result['dtype']}",
                    "CUDA-graph medians, TFLOP/s of forward + backward (per config: forward + backward / backward)",
                ),  # fmt: skip
                tabulate(status, headers="keys", tablefmt="github"),
                tabulate(rows, headers="keys", floatfmt=".3g", tablefmt="github"),
                *(
                    [
                        "The best config's backward, GPU time per kernel (torch.profiler, per call):\n\n"
                        + tabulate(kernels, headers="keys", floatfmt=".4g", tablefmt="github")
                    ]
                    if kernels
                    else []
                ),
                *(["Baselines without a time:\n\n" + "\n".join(f"- {m}" for m in missing)] if missing else []),
            ]
        )
        + "\n"
    )


def main() -> None:
    config_probe.attention_main(
        sys.modules[__name__], hopper_backward.config_problem, timeout=150, forward_config=FORWARD_CONFIG
    )


if __name__ == "__main__":
    main()
