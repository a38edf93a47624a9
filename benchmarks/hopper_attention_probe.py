"""Probe of the Gluon attention forward (autotune/kernels/attention/hopper_forward.py) on a Hopper GPU: each config of
a small grid checked against flash_attn's float64 reference with the gate's comparison (output and log-sum-exp),
then timed on the presets against flash_attn (its shipped rows) and sdpa's cuDNN and flash backends, one run.

    python benchmarks/hopper_attention_probe.py --out benchmarks/results/H100/hopper-attention-probe

Writes OUT.md and OUT.json. Each config runs in a child process of its own under --timeout seconds, so a config
that fails to compile, computes wrong, crashes or hangs is reported and the probe goes on. Times are medians of
CUDA-graph replays (autotune.measure.bench.kernel_time), TFLOP/s as FlashAttention counts them: 4*B*H*Nq*Nk*D,
half when causal. A wrong config is still timed (marked "wrong"), but never counted as the best.
"""

from __future__ import annotations

import json
import sys
import traceback

import config_probe
import torch
from config_probe import describe, emit
from tabulate import tabulate

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune.gate.compare import compare_outputs
from autotune.kernels import flash_attn
from autotune.kernels.attention import hopper_forward
from autotune.kernels.attention import problems as problems_
from autotune.measure import bench, environment
from autotune.measure.attention_peers import sdpa_call
from autotune.measure.peers import PeerUnavailable
from autotune.spec import shape_label

PRESETS = (
    "4x16x4096x128",
    "4x16x4096x128+causal",
    "16x16x1024x128",
    "1x16x16384x128+causal",
    "4x32x4096x64",
    "4x32x4096x64+causal",
)
PEERS = ("sdpa-cudnn", "sdpa-flash")
EDGE_CHECKS = (
    problems_.problem(1, 4, 1, 128, kv_heads=2, nk=300),  # one query, GQA
    problems_.problem(2, 4, 77, 64, kv_heads=1, nk=5, causal=True),  # fewer keys than a block, Nq > Nk
    problems_.problem(1, 2, 500, 128, nk=70, causal=True),
    problems_.problem(1, 2, 129, 64, nk=1000, causal=True, magnitude=8.0),  # large logits, Nq < Nk
    problems_.problem(1, 2, 300, 128, nk=301, magnitude=0.01, layout="bnhd"),  # near-uniform, transposed
    problems_.problem(1, 2, 200, 64, nk=190, scale=0.3, layout="padded"),
)
"""Checked besides each preset (at batch 1) and its bucket's edges (flash_attn's bucket_edges, lengths up to 2k)."""
GRID = [
    {
        "BLOCK_M": m,
        "BLOCK_N": n,
        "NUM_STAGES": s,
        "NUM_CONSUMERS": c,
        "PINGPONG": c == 2 and pp,
        "CONSUMER_REGISTERS": r,
    }
    for m, n, s, c, pp, r in (
        (64, 128, 2, 2, True, 240),
        (64, 128, 2, 2, False, 240),
        (64, 128, 2, 1, False, 232),
        (64, 64, 2, 2, True, 240),
        (64, 64, 2, 1, False, 232),
        (64, 128, 3, 2, True, 240),
        (128, 64, 2, 1, False, 232),
        (64, 256, 2, 2, True, 240),
    )
]
"""FlashAttention-3's shape (two 64-row consumers, 128-key blocks, ping-pong) and its neighbours: without ping-pong,
one consumer, 64- and 256-key blocks, 3 stages, 128 rows a consumer. A config whose tiles do not fit a head dim is
skipped at it. About half a minute each on an H100 host (4 compiles, the checks, the timings)."""
QUICK = GRID[:3]


def label(config: dict) -> str:
    pingpong = "pp" if config["PINGPONG"] else ""
    return (
        f"m{config['BLOCK_M']}n{config['BLOCK_N']}s{config['NUM_STAGES']}c{config['NUM_CONSUMERS']}{pingpong}"
        f"r{config['CONSUMER_REGISTERS']}"
    )


def checks(presets: list[dict]) -> list[dict]:
    """The problems each config is checked on: the presets at batch 1, their buckets' edges, EDGE_CHECKS."""
    out = []
    for p in presets:
        out.append({**p, "batch": 1})
        small = problems_.problem(
            1,
            p["heads"],
            min(p["nq"], 2048),
            p["head_dim"],
            kv_heads=p["kv_heads"],
            nk=min(p["nk"], 2048),
            causal=p["causal"],
        )
        out += problems_.bucket_edges(small)
    out += [e for e in EDGE_CHECKS if e["head_dim"] in {p["head_dim"] for p in presets}]
    unique = {json.dumps(p, sort_keys=True): p for p in out}
    return list(unique.values())


def _inputs(problem: dict, dtype: torch.dtype) -> dict:
    return autotune.get("flash_attn").make_inputs(problem, dtype, autotune.gpu.device(), 0)


def child(config: dict, dtype: torch.dtype, presets: list[dict]) -> None:
    """One config: every check problem (stops at a call it does not support), then every preset timed; JSON lines."""
    spec = autotune.get("flash_attn")
    stage = "checking"
    try:
        for problem in checks(presets):
            if problem["head_dim"] not in hopper_forward.HEAD_DIMS or hopper_forward.config_problem(
                config, problem["head_dim"]
            ):
                continue
            inputs = _inputs(problem, dtype)
            args = (inputs["q"], inputs["k"], inputs["v"], inputs["is_causal"], inputs["scale"], config)
            if (reason := hopper_forward.supported(*args)) is not None:
                emit(kind="unsupported", reason=reason)
                return
            out = hopper_forward.hopper_attention_forward(*args)
            if out[0].is_cuda:
                torch.cuda.synchronize()  # a fault surfaces here, as this check's
            err, budget, failure = compare_outputs(
                out, spec.reference(inputs), spec.baseline(inputs), spec.error_floor(inputs)
            )
            emit(
                kind="check",
                shape=describe(problem),
                problem=problem,
                ok=failure is None,
                error=err,
                budget=budget,
                reason=failure,
            )
        stage = "timing"
        for problem in presets:
            if hopper_forward.config_problem(config, problem["head_dim"]):
                continue
            inputs = _inputs(problem, dtype)
            q, k, v = inputs["q"], inputs["k"], inputs["v"]
            o, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)

            def call():
                hopper_forward.launch(q, k, v, o, lse, inputs["is_causal"], inputs["scale"], config)

            ms, method = bench.kernel_time(call, warmup_ms=25, rep_ms=200)
            flops = problems_.forward_cost(problem, dtype).flops
            emit(kind="time", shape=shape_label(problem), ms=ms, method=method, tflops=flops / ms / 1e9)
    except Exception as exc:
        emit(kind="error", stage=stage, error="".join(traceback.format_exception(exc, limit=-3))[-3000:])


def run_config(config: dict, dtype_name: str, shapes: list[str], timeout: float) -> dict:
    """config's child process, under timeout: its checks, times, and what stopped it, if anything."""
    return config_probe.run_config(__file__, config, label(config), dtype_name, shapes, timeout)


def outcome(config: dict, stdout: str, stderr: str, returncode: int, stopped: str | None = None) -> dict:
    """What config's child said (config_probe.outcome)."""
    return config_probe.outcome(config, label(config), stdout, stderr, returncode, stopped)


def baselines(presets: list[dict], dtype: torch.dtype) -> dict:
    """TFLOP/s of flash_attn (its rows for this GPU) and each sdpa peer on each preset, or why there is none."""
    out = {}
    for problem in presets:
        inputs = _inputs(problem, dtype)
        flops = problems_.forward_cost(problem, dtype).flops
        calls = {}
        with torch.no_grad():
            calls["flash_attn"] = lambda i=inputs: flash_attn(
                i["q"], i["k"], i["v"], is_causal=i["is_causal"], scale=i["scale"], enable_gqa=i["enable_gqa"]
            )
            for peer in PEERS:
                try:
                    calls[peer] = sdpa_call(peer, inputs)
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


def text(result: dict) -> str:
    """The markdown: where it ran, each config's status, TFLOP/s per preset, the best correct config's ratios."""
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
            (c["times"][shape]["tflops"], c["label"]) for c in configs if shape in c["times"] and c["status"] == "ok"
        ]
        best, best_label = max(correct) if correct else (None, None)
        row.update({"best gluon": best, "best config": best_label})
        for name in ("flash_attn", "sdpa-cudnn"):
            row[f"x {name}"] = best / row[name] if best and row[name] else None
        for c in configs:
            t = c["times"].get(shape)
            row[c["label"]] = None if t is None else f"{t['tflops']:.0f}{'' if c['status'] == 'ok' else ' wrong'}"
        rows.append(row)
    missing = sorted(
        {
            f"{name} at {s}: {v.get('unsupported') or v.get('error')}"
            for s, b in result["baselines"].items()
            for name, v in b.items()
            if "tflops" not in v
        }
    )
    return (
        "\n\n".join(
            [
                "# Gluon attention forward (hopper_forward.py): configs checked and timed",
                environment.probe_header(
                    result["environment"], f"dtype {result['dtype']}", "CUDA-graph medians, TFLOP/s"
                ),
                tabulate(status, headers="keys", tablefmt="github"),
                tabulate(rows, headers="keys", floatfmt=".3g", tablefmt="github"),
                *(["Baselines without a time:\n\n" + "\n".join(f"- {m}" for m in missing)] if missing else []),
            ]
        )
        + "\n"
    )


def main() -> None:
    config_probe.attention_main(sys.modules[__name__], hopper_forward.config_problem, timeout=300)


if __name__ == "__main__":
    main()
