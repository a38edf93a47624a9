"""cProfile of the matmul family's eager forward + backward on the GPU: where the host's time goes."""
import cProfile, io, pstats, sys, time
import torch
import torch.nn.functional as F
from autotune.kernels import linear, matmul, mlp
torch.manual_seed(0)
dt = torch.bfloat16
def r(*s, scale=1.0):
    return (torch.randn(s, device="cuda") * scale).to(dt).requires_grad_()
x, w1, b1, w2, b2 = r(1024, 1024), r(4096, 1024, scale=1/32), r(4096), r(1024, 4096, scale=1/64), r(1024)
g = torch.randn(1024, 1024, device="cuda", dtype=dt)
a, b = r(1024, 1024), r(1024, 1024, scale=1/32)
cases = {
    "mlp": (lambda: mlp(x, w1, b1, w2, b2), (x, w1, b1, w2, b2)),
    "matmul": (lambda: matmul(a, b), (a, b)),
    "linear": (lambda: linear(x, a, None, "gelu_tanh"), (x, a)),
}
for name, (fn, leaves) in cases.items():
    step = lambda: torch.autograd.grad(fn(), leaves, g)
    for _ in range(5): step()
    torch.cuda.synchronize()
    n = 50
    t = time.perf_counter()
    for _ in range(n): step()
    host = (time.perf_counter() - t) / n * 1e3
    torch.cuda.synchronize()
    p = cProfile.Profile(); p.enable()
    for _ in range(n): step()
    p.disable(); torch.cuda.synchronize()
    s = io.StringIO(); st = pstats.Stats(p, stream=s)
    st.sort_stats("tottime").print_stats(25)
    st.sort_stats("cumulative").print_stats(40)
    print(f"==== {name}: host {host:.3f} ms per fwd+bwd (unprofiled)\n", s.getvalue()[-14000:], flush=True)
