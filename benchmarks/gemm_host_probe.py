"""Are the matmul family's eager forward + backward calls limited by the GPU or by the host? `linear`, `matmul` and
`mlp` beside the same computation in eager torch, forward + backward (`torch.autograd.grad`), each timed three
ways in one run:

- do_bench: `autotune.bench.time_ms` (L2 cleared before each call);
- graph: replayed from a CUDA graph (`autotune.bench.graph_ms`): the GPU's time alone;
- host: the host's time per call, the median of 7 blocks of 40 calls queued without a sync (Python, autograd,
  Triton's launcher).

Where host exceeds graph, the call is host-bound and do_bench times the host. Run it on two checkouts to compare
them (`--label` names the run).

    python benchmarks/gemm_host_probe.py --label after --out results/gemm-host-probe-GPU-DATE-after
"""

from __future__ import annotations

import argparse
import statistics
import time

import tabulate
import torch
import torch.nn.functional as F

from autotune.measure import bench
from autotune.measure import report
from autotune.kernels import linear
from autotune.kernels import matmul
from autotune.kernels import mlp

HOST_BLOCKS, HOST_CALLS = 7, 40


def host_ms(fn) -> float:
    """The median over HOST_BLOCKS blocks of the host's time per call in HOST_CALLS calls queued without a sync
    (a sync after each block): this host's time per call moves by up to 2x from one block to the next."""
    fn()
    times = []
    for _ in range(HOST_BLOCKS):
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(HOST_CALLS):
            fn()
        times.append((time.perf_counter() - started) * 1000 / HOST_CALLS)
    torch.cuda.synchronize()
    return statistics.median(times)


def problems(dtype: torch.dtype):
    """(shape, {impl: the forward}, the leaves, the output's gradient) for each problem."""
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * scale).to(dtype).requires_grad_()

    for m, k, n, act in ((8192, 4096, 256, None), (1024, 1024, 1024, "gelu_tanh")):
        x, w, b = randn(m, k), randn(n, k, scale=k ** -0.5), randn(n)
        fns = {"autotune": lambda x=x, w=w, b=b, act=act: linear(x, w, b, act),
               "torch": lambda x=x, w=w, b=b, act=act: F.gelu(F.linear(x, w, b), approximate="tanh") if act else F.linear(x, w, b)}
        yield f"linear {m}x{k}x{n}" + (f" {act}" if act else ""), fns, (x, w, b), torch.randn(m, n, device="cuda", dtype=dtype)
    for m, k, n in ((1024, 1024, 1024), (4096, 4096, 4096)):
        a, b = randn(m, k), randn(k, n, scale=k ** -0.5)
        yield f"matmul {m}x{k}x{n}", {"autotune": lambda a=a, b=b: matmul(a, b), "torch": lambda a=a, b=b: a @ b}, (a, b), \
            torch.randn(m, n, device="cuda", dtype=dtype)
    for m, k, h, n in ((8192, 1024, 4096, 256), (1024, 1024, 4096, 1024)):
        x, w1, b1, w2, b2 = randn(m, k), randn(h, k, scale=k ** -0.5), randn(h), randn(n, h, scale=h ** -0.5), randn(n)
        fns = {"autotune": lambda t=(x, w1, b1, w2, b2): mlp(*t),
               "torch": lambda t=(x, w1, b1, w2, b2): F.linear(F.gelu(F.linear(t[0], t[1], t[2]), approximate="tanh"), t[3], t[4])}
        yield f"mlp {m}x{k}x{h}x{n}", fns, (x, w1, b1, w2, b2), torch.randn(m, n, device="cuda", dtype=dtype)


def run(dtype: torch.dtype) -> list[list]:
    rows = []
    for shape, fns, leaves, grad in problems(dtype):
        for name, fn in fns.items():
            def fwd(fn=fn):
                with torch.no_grad():
                    fn()

            def fwd_bwd(fn=fn):
                torch.autograd.grad(fn(), leaves, grad)

            for label, step in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                step()
                do_bench = bench.time_ms(step, warmup_ms=50, rep_ms=300)
                graph = bench.graph_ms(step, warmup_ms=50, rep_ms=300)
                host = host_ms(step)
                rows.append([shape, name, label, do_bench, graph, host,
                             "host" if graph is not None and host > graph else "GPU"])
                print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="", help="what this run measures (e.g. the commit), for the header")
    parser.add_argument("--out", help="write OUT.md and OUT.json")
    args = parser.parse_args()
    env = report.environment()
    header = report.probe_header(env, "bf16", *([args.label] if args.label else []))
    rows = run(torch.bfloat16)
    headers = ["shape", "impl", "pass", "do_bench ms", "graph ms", "host ms per call", "bound by"]
    text = header + "\n\n" + tabulate.tabulate(rows, headers=headers, tablefmt="github", floatfmt=".4g") + "\n"
    print(text)
    if args.out:
        report.save(args.out, {"environment": env, "label": args.label, "headers": headers, "rows": rows}, text)


if __name__ == "__main__":
    main()
