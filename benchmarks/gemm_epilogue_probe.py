"""Would a different persistent-GEMM loop or epilogue make this repo's GEMM faster on this GPU? Same run,
same inputs: a stand-alone copy of the tma_persistent kernel (y = activation(x @ w.T + bias), x (M, K) and
w (N, K) row-major, as `linear` calls it) in six forms, against the shipped `linear` and torch eager:

- the tile loop plain, or `tl.range(..., flatten=True)` (Triton pipelines the flattened tile and K loops
  as one, so a tile's loads can start during the previous tile's epilogue);
- the output stored through pointers (as `_gemm.store_tile` does), through a TMA descriptor, or through a
  descriptor in two half tiles (half the registers and shared memory live at once).

    python benchmarks/gemm_epilogue_probe.py --out results/gemm-epilogue-probe-GPU-DATE.md

Each (problem, config) runs in its own process under --seconds, so a form that hangs costs its rows, not
the run. Every form is timed in order and then in reverse, the two medians averaged (as `autotune bench`
does); each row gives the largest difference from the torch result, relative to its largest magnitude.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys

import torch
import triton
import triton.language as tl

from autotune.kernels.gemm.gemm import ACTIVATIONS, activate, sm_count, tile_position

CONFIGS = [
    {"variant": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "SPLIT_K": 1},
    {"variant": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4, "SPLIT_K": 1},
    {"variant": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4, "SPLIT_K": 1},
]
PROBLEMS = [(8192, 4096, 16384, "gelu_tanh"), (8192, 16384, 4096, "none"), (8192, 4096, 14336, "none")]
"""(M, K, N, activation), all with a bias: linear's goal shape, its k=16384 preset, matmul's 14336 shape."""
FORMS = [(flatten, store) for flatten in (False, True) for store in ("pointer", "tma", "tma_halves")]
STORES = {"pointer": 0, "tma": 1, "tma_halves": 2}


@triton.jit
def _probe_kernel(a_desc, b_desc, y_desc, y_ptr, bias_ptr, M, N, K, ACTIVATION: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr, STORE: tl.constexpr):
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_blocks = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), n_tiles, PROGRAMS, flatten=FLATTEN):
        _, row, col = tile_position(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for kb in range(k_blocks):
            a = a_desc.load([row, kb * BLOCK_K])
            b = b_desc.load([col, kb * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        cols = col + tl.arange(0, BLOCK_N)
        acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        y = activate(acc, ACTIVATION).to(y_ptr.dtype.element_ty)
        if STORE == 0:
            rows = row + tl.arange(0, BLOCK_M)
            offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
            tl.store(y_ptr + offs, y, mask=(rows[:, None] < M) & (cols[None, :] < N))
        elif STORE == 1:
            y_desc.store([row, col], y)
        else:
            halves = tl.permute(tl.reshape(y, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            y_desc.store([row, col], left)
            y_desc.store([row, col + BLOCK_N // 2], right)


def probe_linear(x, w, bias, y, config: dict, activation: str, flatten: bool, store: str) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    m, k = x.shape
    n = w.shape[0]
    programs = min(triton.cdiv(m, bm) * triton.cdiv(n, bn), sm_count())
    y_block = [bm, bn // 2] if store == "tma_halves" else [bm, bn]
    _probe_kernel[(programs,)](
        TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
        TensorDescriptor.from_tensor(y, y_block), y, bias, m, n, k, ACTIVATION=ACTIVATIONS[activation],
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config["GROUP_M"], PROGRAMS=programs, FLATTEN=flatten,
        STORE=STORES[store], num_warps=config["num_warps"], num_stages=config["num_stages"])


def measure_case(problem: int, config: int) -> list[dict]:
    """Every form of CONFIGS[config] on PROBLEMS[problem], with the shipped linear and torch eager."""
    from autotune import kernels
    from autotune.measure.bench import time_ms

    m, k, n, activation = PROBLEMS[problem]
    cfg = CONFIGS[config]
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    act = {"none": lambda t: t, "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[activation]
    expected = act(torch.nn.functional.linear(x, w, bias))
    calls = {"torch eager": lambda: act(torch.nn.functional.linear(x, w, bias)),
             "shipped linear": lambda: kernels.linear(x, w, bias, activation=None if activation == "none" else activation)}
    outputs = {}
    for flatten, store in FORMS:
        y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        name = f"{'flatten' if flatten else 'plain'} / {store}"
        try:
            probe_linear(x, w, bias, y, cfg, activation, flatten, store)
            torch.cuda.synchronize()
        except Exception as e:  # a form this Triton cannot compile: recorded, the others still timed
            outputs[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
            continue
        outputs[name] = y
        calls[name] = (lambda y=y, flatten=flatten, store=store: probe_linear(x, w, bias, y, cfg, activation, flatten, store))
    outputs["shipped linear"] = calls["shipped linear"]()
    scale = expected.float().abs().max().item()
    ms = {name: [] for name in calls}
    for order in (list(calls), list(reversed(calls))):
        for name in order:
            ms[name].append(time_ms(calls[name]))
    flops = 2 * m * n * k
    records = []
    for name in list(calls) + [n_ for n_ in outputs if n_ not in calls]:
        out = outputs.get(name)
        if isinstance(out, str):
            records.append(dict(problem=f"{m}x{k}x{n},{activation}", config=cfg, form=name, error=out))
            continue
        t = sum(ms[name]) / 2
        diff = None if out is None else (out.float() - expected.float()).abs().max().item() / scale
        records.append(dict(problem=f"{m}x{k}x{n},{activation}", config=cfg, form=name, ms=t, rounds=ms[name],
                            tflops=flops / t / 1e9, max_rel_diff=diff))
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write OUT (a markdown table) and OUT.json")
    parser.add_argument("--seconds", type=int, default=120, help="time limit of each (problem, config) process")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # PROBLEM,CONFIG: measure one case, print JSON
    args = parser.parse_args()
    if args.case:
        problem, config = map(int, args.case.split(","))
        print(json.dumps(measure_case(problem, config)))
        return
    records = []
    for problem in range(len(PROBLEMS)):
        for config in range(len(CONFIGS)):
            try:
                done = subprocess.run([sys.executable, __file__, "--case", f"{problem},{config}"], capture_output=True,
                                      text=True, timeout=args.seconds)
                lines = done.stdout.strip().splitlines()
                got = json.loads(lines[-1]) if done.returncode == 0 and lines else \
                    [dict(problem=str(PROBLEMS[problem]), config=CONFIGS[config], form="all",
                          error=f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:] }")]
            except subprocess.TimeoutExpired:
                got = [dict(problem=str(PROBLEMS[problem]), config=CONFIGS[config], form="all",
                            error=f"no result in {args.seconds} s")]
            records += got
            for r in got:
                print(_line(r), flush=True)
    if args.out:
        header = (f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; triton {triton.__version__}; "
                  f"date {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}\n\n"
                  "| problem | config | form | ms | TFLOP/s | max rel diff | error |\n| --- | --- | --- | --- | --- | --- | --- |\n")
        with open(args.out, "w") as f:
            f.write(header + "".join(_line(r) + "\n" for r in records))
        with open(args.out + ".json", "w") as f:
            json.dump(records, f, indent=1)


def _line(r: dict) -> str:
    c = r["config"]
    config = f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} GM{c['GROUP_M']} w{c['num_warps']} s{c['num_stages']}"
    ms = f"{r['ms']:.4f}" if "ms" in r else ""
    rate = f"{r['tflops']:.1f}" if "tflops" in r else ""
    diff = f"{r['max_rel_diff']:.2e}" if r.get("max_rel_diff") is not None else ""
    return f"| {r['problem']} | {config} | {r['form']} | {ms} | {rate} | {diff} | {r.get('error', '')} |"


if __name__ == "__main__":
    main()
