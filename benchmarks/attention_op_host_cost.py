"""Where flash_attn's eager forward + backward spends host time (GPU, bf16, 16x16x1024x64 causal): the custom op
with and without inputs that require grad, the public function, a plain autograd.Function around the same forward
and backward, the forward and backward called directly, a bare launch, and sdpa; then a profile of the op's forward. host = time per call of 200 calls queued without a sync.

    python benchmarks/attention_op_host_cost.py
"""
import time, importlib, torch, cProfile, pstats
from autotune.kernels import flash_attn
fa = importlib.import_module("autotune.kernels.attention.flash_attn")
fb = importlib.import_module("autotune.kernels.attention.flash_attn_backward")
q, k, v, do = (torch.randn(16, 16, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
def host(fn, n=200):
    for _ in range(5): fn()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    h = (time.perf_counter() - t) / n * 1e3; torch.cuda.synchronize(); return h
class Plain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = fa.forward(q, k, v, True, 0.125)
        ctx.save_for_backward(q, k, v, o, lse)
        return o
    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return fb.backward(do, q, k, v, o, lse, True, 0.125)
o, lse = fa.forward(q, k, v, True, 0.125)
cases = {
 "plain forward (flash_attn.forward)": lambda: fa.forward(q, k, v, True, 0.125),
 "op backward (torch.ops.autotune.flash_attn_backward)": lambda: torch.ops.autotune.flash_attn_backward(do, q, k, v, o, lse, True, 0.125),
 "plain backward (flash_attn_backward.backward)": lambda: fb.backward(do, q, k, v, o, lse, True, 0.125),
 "launch only forward": lambda: fa.launch(q, k, v, o, lse, True, 0.125, fa._TUNED.lookup(q.dtype, (16, 16, 16, 1024, 1024, 64, True), None, None)),
 "op forward, inputs require grad": lambda: torch.ops.autotune.flash_attn(qg, kg, vg, True, 0.125),
 "op forward, no grad inputs": lambda: torch.ops.autotune.flash_attn(q, k, v, True, 0.125),
 "public flash_attn forward, inputs require grad": lambda: flash_attn(qg, kg, vg, is_causal=True),
 "public flash_attn fwd+bwd": lambda: torch.autograd.grad(flash_attn(qg, kg, vg, is_causal=True), (qg, kg, vg), do),
 "plain autograd.Function fwd+bwd": lambda: torch.autograd.grad(Plain.apply(qg, kg, vg), (qg, kg, vg), do),
 "sdpa fwd+bwd (default backend)": lambda: torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=True), (qg, kg, vg), do),
}
for name, fn in cases.items():
    print(f"{name}: host {host(fn):.4f} ms per call", flush=True)
pr = cProfile.Profile(); pr.enable()
for _ in range(100): torch.ops.autotune.flash_attn(qg, kg, vg, True, 0.125)
pr.disable(); torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(8)
