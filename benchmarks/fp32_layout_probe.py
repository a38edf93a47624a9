"""Why is float32 `linear` slower than float32 `matmul` of the same sizes? Same run, same inputs: the GEMM
kernel (`autotune.kernels._gemm.gemm`) in IEEE float32 on b = (K, N) row-major (what `matmul` times) and on
b = w.T for a row-major w (N, K) (what `linear` passes), each in a few configs, against torch, and the cost
of making w.T contiguous first. Since `gemm` copies such a b to row-major from `FMA_ROW_MAJOR_MIN_M` rows on,
the w.T rows time that copy and the product; also timed: a column-major a, and the public `linear`.

    python benchmarks/fp32_layout_probe.py --out results/fp32-layout-probe-GPU-DATE.md

Each time is a do_bench median (L2 cleared), timed through `autotune.bench.time_ms`; each row gives the
largest difference from torch's float32 result, relative to its largest magnitude.
"""

from __future__ import annotations

import argparse
import datetime

import tabulate
import torch
import torch.nn.functional as F

from autotune import gpu
from autotune.measure import bench
from autotune.kernels import linear
from autotune.kernels.gemm import gemm as _gemm

CONFIGS = [
    {"variant": "tiled", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3, "SPLIT_K": 1},
    {"variant": "persistent", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 4, "num_stages": 5, "SPLIT_K": 1},
    {"variant": "tiled", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "SPLIT_K": 1},
]
PROBLEMS = [(8192, 4096, 16384), (8192, 16384, 4096), (4096, 4096, 4096)]
"""(M, K, N): linear's goal shape, its k=16384 preset, matmul's 4096^3."""


def short(config: dict) -> str:
    return (f"{config['variant']} {config['BLOCK_M']}x{config['BLOCK_N']}x{config['BLOCK_K']} "
            f"g{config['GROUP_M']} w{config['num_warps']} s{config['num_stages']}")


def rel_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y - ref).abs().max() / ref.abs().max())


def probe(m: int, k: int, n: int) -> list[dict]:
    torch.manual_seed(0)
    x = torch.randn(m, k, device=gpu.device())
    w = torch.randn(n, k, device=gpu.device())
    b_kn = w.t().contiguous()
    ref = F.linear(x, w)
    rows = [{"operand b": "torch F.linear(x, w)", "config": "cuBLAS", "ms": bench.time_ms(lambda: F.linear(x, w)),
             "error": 0.0},
            {"operand b": "torch x @ w.T.contiguous()", "config": "cuBLAS", "ms": bench.time_ms(lambda: x @ b_kn),
             "error": rel_error(x @ b_kn, ref)},
            {"operand b": "w.T.contiguous() alone", "config": "copy", "ms": bench.time_ms(lambda: w.t().contiguous()),
             "error": 0.0}]
    y = torch.empty(m, n, device=gpu.device())
    x_cols = x.t().contiguous().t()  # x's values, unit stride down the columns (as linear's dw = dy.T @ x reads dy)

    def run_a():
        _gemm.gemm(x_cols.unsqueeze(0), b_kn.unsqueeze(0), y.unsqueeze(0), CONFIGS[0])
    y.fill_(float("nan"))
    run_a()
    rows.append({"operand b": "a column-major, b (K, N) row-major", "config": short(CONFIGS[0]),
                 "ms": bench.time_ms(run_a), "error": rel_error(y, ref)})
    rows.append({"operand b": "autotune linear(x, w)", "config": "the runtime's",
                 "ms": bench.time_ms(lambda: linear(x, w)), "error": rel_error(linear(x, w), ref)})
    for config in CONFIGS:
        for label, b in (("(K, N) row-major", b_kn), ("w.T, w (N, K) row-major", w.t())):
            def run(b=b, config=config):
                _gemm.gemm(x.unsqueeze(0), b.unsqueeze(0), y.unsqueeze(0), config)
            y.fill_(float("nan"))
            run()
            rows.append({"operand b": label, "config": short(config), "ms": bench.time_ms(run), "error": rel_error(y, ref)})
    for row in rows:
        row["TFLOP/s"] = 2 * m * n * k / row["ms"] / 1e9
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="also write the tables to this markdown file")
    parser.add_argument("--problem", action="append", help="MxKxN (repeatable; default: %s)" % PROBLEMS)
    args = parser.parse_args()
    problems = [tuple(map(int, p.split("x"))) for p in args.problem] if args.problem else PROBLEMS
    import triton

    lines = [f"GPU: {gpu.current_gpu().device_name}; torch {torch.__version__}; triton {triton.__version__}; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M}Z; float32, IEEE products "
             f"(torch.backends.cuda.matmul.allow_tf32 = {torch.backends.cuda.matmul.allow_tf32})", ""]
    for m, k, n in problems:
        lines += [f"## M={m} K={k} N={n}", "", tabulate.tabulate(probe(m, k, n), headers="keys", tablefmt="github",
                                                                    floatfmt=".4g"), ""]
        print("\n".join(lines[-4:]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines))


if __name__ == "__main__":
    main()
