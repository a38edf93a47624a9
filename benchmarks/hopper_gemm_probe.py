"""Probe of the Gluon Hopper GEMM (autotune/kernels/gemm/hopper_gemm.py) on a Hopper GPU: each config of a small grid
checked against a float64 reference with the gate's comparison (every operand layout, edges no block divides,
the timed shapes themselves), then timed on the Llama MLP's products against cuBLAS (torch.mm) and autotune's
tuned matmul / linear (their shipped rows); the gated configs on the gate/up product against the tuned gated
kernel (gated_mlp's rows) and cuBLAS's one product of [w_gate; w_up] with and without torch's silu(g) * u.

    python benchmarks/hopper_gemm_probe.py --out benchmarks/results/H100/hopper-gemm-probe [--quick]

Writes OUT.md and OUT.json, again after each config. Each config runs in a child process of its own under
--timeout seconds, so a config that fails to compile, computes wrong, crashes or hangs is reported and the
probe goes on. Times are medians of CUDA-graph replays (autotune.measure.bench.kernel_time); TFLOP/s count
2*M*N*K (the gated: both projections). A wrong config is still timed (marked "wrong"), never counted as best.
"""

from __future__ import annotations

import argparse
import json
import math
import traceback

import config_probe
import torch
import torch.nn.functional as F
from config_probe import emit
from tabulate import tabulate

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune.gate.compare import compare_outputs
from autotune.kernels.gemm import gated_mlp, hopper_gemm
from autotune.kernels.gemm.matmul import linear, mm
from autotune.measure import bench, environment
from autotune.search_spaces import hopper_gemm_config as cfg
from autotune.spec import dtype_from_name

PLAIN_SHAPES = ("4096x4096x14336:nt", "4096x14336x4096:nt", "8192x4096x4096:nt", "4096x4096x14336:nn",
                "4096x14336x4096:nn", "4096x4096x14336:tn")  # fmt: skip
"""MxKxN:layout of the decoder layer's MLP products: a row-major (n) or transposed (t), then b: "nt" is x @ W.T
(the forward), "nn" dy @ W (dx), "tn" dy.T @ x (dW)."""
GATED_SHAPES = ("4096x4096x14336", "4096x4096x14336+gu")
"""MxKxH of the gate/up product; +gu also stores [g | u] (a training forward)."""
CHECKS = {
    "plain": [f"200x136x320:{layout}" for layout in ("nt", "nn", "tn", "tt")] + ["1x64x64:nt", "296x1000x264:tn*8"],
    "gated": ["200x136x320+gu", "200x136x320:tn+gu", "64x64x64", "130x72x136+gu*8"],
}
"""Checked besides the timed shapes: every layout at sizes no block divides, a single row, large values (*8)."""
_PLAIN = {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_STAGES": 3, "NUM_CONSUMERS": 2,
          "SCHEDULE": "cooperative", "GROUP_M": 8, "CONSUMER_REGISTERS": 240}  # fmt: skip
_PINGPONG = {**_PLAIN, "BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 4, "SCHEDULE": "pingpong"}
GRID = [
    ("plain", _PLAIN),
    ("plain", _PINGPONG),
    ("gated", {**_PLAIN, "BLOCK_N": 128}),
    ("plain", {**_PLAIN, "BLOCK_M": 128, "BLOCK_N": 128}),
    ("plain", {**_PINGPONG, "BLOCK_M": 64, "BLOCK_N": 256, "NUM_STAGES": 3}),
    ("plain", {**_PINGPONG, "NUM_STAGES": 5}),
    ("plain", {**_PLAIN, "GROUP_M": 16}),
    ("gated", {**_PLAIN, "BLOCK_N": 128, "NUM_STAGES": 4}),
    ("gated", {**_PINGPONG, "BLOCK_N": 64}),
    ("gated", {**_PLAIN, "BLOCK_M": 128, "BLOCK_N": 64}),
]
"""(kind, config): 128x256 tiles of two 64-row consumers (Triton's and CUTLASS's fastest Hopper shape), ping-pong
128x128 (CUTLASS's), 256x128 cooperative, ping-pong 64x256, a deeper ring, wider L2 groups; the gated GEMM at
128 x (128 + 128) cooperative, 4 stages, ping-pong 128 x (64 + 64), 256 x (64 + 64)."""
QUICK = GRID[:3]


def label(kind: str, config: dict) -> str:
    schedule = "pp" if config["SCHEDULE"] == "pingpong" else "co"
    return (
        f"{kind[0]}-{schedule}{config['NUM_CONSUMERS']}-m{config['BLOCK_M']}n{config['BLOCK_N']}k{config['BLOCK_K']}"
        f"s{config['NUM_STAGES']}g{config['GROUP_M']}"
    )


def parse(shape: str) -> dict:
    """'MxKxN[:layout][+gu][*magnitude]' as a problem dict."""
    shape, _, magnitude = shape.partition("*")
    shape, gu, _ = shape.partition("+gu")
    sizes, _, layout = shape.partition(":")
    m, k, n = (int(s) for s in sizes.split("x"))
    return {"m": m, "k": k, "n": n, "layout": layout or "nt", "store_gu": bool(gu), "magnitude": float(magnitude or 1)}


def _operand(rows: int, cols: int, transposed: bool, magnitude: float, device) -> torch.Tensor:
    """A float32 (rows, cols) of random normals times magnitude / sqrt(cols), row-major or a transpose's view."""
    t = torch.randn((cols, rows) if transposed else (rows, cols), device=device) * (magnitude / math.sqrt(cols))
    return t.t() if transposed else t


def inputs(kind: str, p: dict, dtype: torch.dtype, seed: int = 0) -> dict:
    """a, b (plain: b (K, N), "t" the transpose of a row-major (N, K) weight) or x, w_gate, w_up (gated: weights
    (H, K), row-major where the layout's second letter is "t", as linear's weight.T reads)."""
    torch.manual_seed(seed)
    device = autotune.gpu.device()
    m, k, n, layout, mag = p["m"], p["k"], p["n"], p["layout"], p["magnitude"]
    a = _operand(m, k, layout[0] == "t", mag, device).to(dtype)
    if kind == "plain":
        return {"a": a, "b": _operand(n, k, layout[1] != "t", 1.0, device).t().to(dtype)}
    weights = [_operand(n, k, layout[1] != "t", 1.0, device).to(dtype) for _ in range(2)]
    return {"x": a, "w_gate": weights[0], "w_up": weights[1], "store_gu": p["store_gu"]}


def expected(kind: str, i: dict, dtype: torch.dtype | None) -> tuple[torch.Tensor, ...]:
    """The outputs in `dtype` (None: the inputs' own, torch's way), as the kernel returns them."""
    if kind == "plain":
        a, b = (i["a"], i["b"]) if dtype is None else (i["a"].to(dtype), i["b"].to(dtype))
        return (a @ b,)
    x, wg, wu = (i["x"], i["w_gate"], i["w_up"]) if dtype is None else (i[k].to(dtype) for k in ("x", "w_gate", "w_up"))
    g, u = x @ wg.t(), x @ wu.t()
    h = F.silu(g) * u
    return (h, torch.cat([g, u], 1)) if i["store_gu"] else (h,)


def floors(kind: str, i: dict) -> tuple[torch.Tensor, ...]:
    """The gate's error floors: a sum's typical size, |a| @ |b| / sqrt(K); h's, the product of g's and u's."""
    if kind == "plain":
        a, b = i["a"].double().abs(), i["b"].double().abs()
        return (a @ b / math.sqrt(a.shape[1]),)
    x = i["x"].double().abs()
    g, u = (x @ i[w].double().abs().t() / math.sqrt(x.shape[1]) for w in ("w_gate", "w_up"))
    return (g * u, torch.cat([g, u], 1)) if i["store_gu"] else (g * u,)


def run_kernel(kind: str, i: dict, config: dict) -> tuple[torch.Tensor, ...]:
    if kind == "plain":
        return (hopper_gemm.hopper_matmul(i["a"], i["b"], config),)
    h, gu = hopper_gemm.hopper_gated(i["x"], i["w_gate"], i["w_up"], "silu", i["store_gu"], config)
    return (h, gu) if i["store_gu"] else (h,)


def flops(kind: str, p: dict) -> int:
    return 2 * p["m"] * p["k"] * p["n"] * (2 if kind == "gated" else 1)


def child(kind: str, config: dict, dtype: torch.dtype, shapes: list[str]) -> None:
    """One config: every check problem (stops at a call it does not support), then every shape timed; JSON lines."""
    stage = "checking"
    try:
        for shape in CHECKS[kind] + shapes:
            i = inputs(kind, parse(shape), dtype)
            args = (i["a"], i["b"]) if kind == "plain" else (i["x"], i["w_gate"], i["w_up"], "silu")
            check = hopper_gemm.supported if kind == "plain" else hopper_gemm.gated_supported
            why = check(*args, config)
            if why is not None:
                emit(kind="unsupported", reason=why)
                return
            out = run_kernel(kind, i, config)
            if out[0].is_cuda:
                torch.cuda.synchronize()  # a fault surfaces here, as this check's
            err, budget, failure = compare_outputs(
                out, expected(kind, i, torch.float64), expected(kind, i, None), floors(kind, i)
            )
            emit(kind="check", shape=shape, ok=failure is None, error=err, budget=budget, reason=failure)
            del i, out
        stage = "timing"
        for shape in shapes:
            p = parse(shape)
            i = inputs(kind, p, dtype)
            if kind == "plain":
                c = i["a"].new_empty((p["m"], p["n"]))

                def call(i=i, c=c):
                    hopper_gemm.launch_matmul(i["a"], i["b"], c, config)
            else:
                h = i["x"].new_empty((p["m"], p["n"]))
                gu = i["x"].new_empty((p["m"], 2 * p["n"])) if p["store_gu"] else None

                def call(i=i, h=h, gu=gu):
                    hopper_gemm.launch_gated(i["x"], i["w_gate"], i["w_up"], h, gu, "silu", config)

            ms, method = bench.kernel_time(call, warmup_ms=25, rep_ms=200)
            emit(kind="time", shape=shape, ms=ms, method=method, tflops=flops(kind, p) / ms / 1e9)
    except Exception as exc:
        emit(kind="error", stage=stage, error="".join(traceback.format_exception(exc, limit=-3))[-3000:])


def run_config(kind: str, config: dict, dtype_name: str, shapes: list[str], timeout: float) -> dict:
    """The config's child process, under timeout: its checks, times, and what stopped it, if anything."""
    result = config_probe.run_config(__file__, [kind, config], label(kind, config), dtype_name, shapes, timeout)
    return {**result, "kind": kind, "config": config}


def outcome(kind: str, config: dict, stdout: str, stderr: str, returncode: int, stopped: str | None = None) -> dict:
    """What the config's child said (config_probe.outcome)."""
    return {**config_probe.outcome(config, label(kind, config), stdout, stderr, returncode, stopped), "kind": kind}


def baseline_calls(kind: str, p: dict, i: dict) -> dict:
    """name -> a call of each baseline on these inputs."""
    if kind == "plain":
        a, b = i["a"], i["b"]
        tuned = (lambda: linear(a, b.t())) if p["layout"] == "nt" else (lambda: mm(a, b))
        return {"cublas": lambda: torch.mm(a, b), "tuned": tuned}
    x, w_cat = i["x"], torch.cat([i["w_gate"], i["w_up"]])
    n, store = p["n"], p["store_gu"]
    config = gated_mlp._config(x.dtype, p["m"], p["k"], n, p["k"])

    def cublas_silu_mul():
        gu = x @ w_cat.t()
        return F.silu(gu[:, :n]) * gu[:, n:]

    return {
        "cublas": lambda: x @ w_cat.t(),
        "cublas+silu*mul": cublas_silu_mul,
        "tuned": lambda: gated_mlp.gated_rows(x, i["w_gate"], None, i["w_up"], None, "silu", store, config),
    }


def baselines(kind: str, shapes: list[str], dtype: torch.dtype) -> dict:
    """TFLOP/s of each baseline on each shape, or why there is none."""
    out = {}
    for shape in shapes:
        p = parse(shape)
        row = {}
        with torch.no_grad():
            for name, call in baseline_calls(kind, p, inputs(kind, p, dtype)).items():
                try:
                    ms, method = bench.kernel_time(call, warmup_ms=25, rep_ms=200)
                    row[name] = {"ms": ms, "method": method, "tflops": flops(kind, p) / ms / 1e9}
                except Exception as exc:
                    row[name] = {"error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}
        out[shape] = row
    return out


def text(result: dict) -> str:
    """The markdown: where it ran, each config's status, TFLOP/s per shape, the best correct config's ratios."""
    configs = result["configs"]
    status = config_probe.status_rows(configs)
    tables = []
    for kind, shapes in (("plain", result["plain_shapes"]), ("gated", result["gated_shapes"])):
        mine = [c for c in configs if c["kind"] == kind]
        rows = []
        for shape in shapes:
            base = result["baselines"][kind].get(shape, {})
            row = {"shape": shape, **{name: v.get("tflops") for name, v in base.items()}}
            timed = [c for c in mine if shape in c["times"] and c["status"] == "ok"]
            correct = [(c["times"][shape]["tflops"], c["label"]) for c in timed]
            best, best_label = max(correct) if correct else (None, None)
            row.update({"best gluon": best, "best config": best_label})
            for name in ("cublas", "tuned"):
                row[f"x {name}"] = best / row[name] if best and row.get(name) else None
            for c in mine:
                t = c["times"].get(shape)
                row[c["label"]] = None if t is None else f"{t['tflops']:.0f}{'' if c['status'] == 'ok' else ' wrong'}"
            rows.append(row)
        if rows:
            tables.append(f"{kind}, TFLOP/s:\n\n" + tabulate(rows, headers="keys", floatfmt=".3g", tablefmt="github"))
    missing = sorted(
        {f"{name} at {s}: {v['error']}" for b in result["baselines"].values() for s, r in b.items()
         for name, v in r.items() if "error" in v}
    )  # fmt: skip
    return "\n\n".join([
        "# Gluon Hopper GEMM (hopper_gemm.py): configs checked and timed",
        environment.probe_header(result["environment"], f"dtype {result['dtype']}", "CUDA-graph medians, TFLOP/s"),
        tabulate(status, headers="keys", tablefmt="github"),
        *tables,
        *(["Baselines without a time:\n\n" + "\n".join(f"- {m}" for m in missing)] if missing else []),
    ]) + "\n"  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="path prefix for .md and .json")
    parser.add_argument("--dtype", default="bf16", help="bf16 or fp16")
    parser.add_argument("--shape", action="append", default=[], help=f"a plain shape (default {PLAIN_SHAPES})")
    parser.add_argument("--gated-shape", action="append", default=[], help=f"a gated shape (default {GATED_SHAPES})")
    parser.add_argument("--quick", action="store_true", help=f"only the first {len(QUICK)} (kind, config)s of GRID")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per config's child process")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # [kind, config] as JSON: run it in this process
    args = parser.parse_args()
    dtype = dtype_from_name(args.dtype)
    if args.child:
        kind, config = json.loads(args.child)
        child(kind, config, dtype, args.shape)
        return
    if not args.out:
        parser.error("--out is required")
    shapes = {"plain": args.shape or list(PLAIN_SHAPES), "gated": args.gated_shape or list(GATED_SHAPES)}
    print("baselines...", flush=True)
    result = {
        "environment": environment.environment(),
        "dtype": args.dtype,
        "plain_shapes": shapes["plain"],
        "gated_shapes": shapes["gated"],
        "baselines": {kind: baselines(kind, s, dtype) for kind, s in shapes.items()},
        "configs": [],
    }
    config_probe.run_grid(
        result,
        QUICK if args.quick else GRID,
        lambda entry: cfg.config_problem(entry[1], entry[0] == "gated"),
        lambda entry: run_config(*entry, args.dtype, shapes[entry[0]], args.timeout),
        lambda entry: label(*entry),
        text,
        args.out,
    )


if __name__ == "__main__":
    main()
