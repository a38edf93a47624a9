"""Host time of linear's eager autograd path against its custom op, and whether the two give the same gradients,
on a GPU (bf16): the public `linear` (a plain autograd.Function in the forward where an eager call records a graph)
and `autotune::linear` called directly (the op every such call went through before). host = time per call of 200
calls queued without a sync; do_bench = `bench.time_ms`; graph = `bench.graph_ms` (the GPU alone).

    python benchmarks/linear_host_probe.py
"""
import time, torch
from autotune.measure import bench
from autotune.kernels import linear
from autotune.kernels.gemm.matmul import linear_op
def host(fn, n=200):
    for _ in range(5): fn()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    h = (time.perf_counter() - t) / n * 1e3; torch.cuda.synchronize(); return h
torch.manual_seed(0)
for m, n, k, act in ((8192, 256, 4096, "none"), (1024, 1024, 1024, "gelu_tanh")):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5).requires_grad_()
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    save = act != "none"
    paths = {"public (eager Function)": lambda: linear(x, w, b, act), "through the op": lambda: linear_op(x, w, b, act, save)[0]}
    grads = {}
    for name, f in paths.items():
        fwd = host(f)
        step = lambda f=f: torch.autograd.grad(f(), (x, w, b), g)
        fb = host(step)
        d = bench.time_ms(step); gr = bench.graph_ms(step)
        grads[name] = step()
        print(f"{m}x{k}x{n} {act} {name}: host fwd {fwd:.4f} ms, host fwd+bwd {fb:.4f} ms; fwd+bwd do_bench {d:.4f} graph {gr}")
    a, c = grads.values()
    print("  gradients equal:", all(torch.equal(p, q) for p, q in zip(a, c)))
