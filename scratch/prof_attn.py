import cProfile, pstats, torch
from autotune.kernels import flash_attn
q, k, v, do = (torch.randn(16, 16, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
q, k, v = (t.requires_grad_() for t in (q, k, v))
def step():
    torch.autograd.grad(flash_attn(q, k, v, is_causal=True), (q, k, v), do)
for _ in range(10): step()
torch.cuda.synchronize()
pr = cProfile.Profile(); pr.enable()
for _ in range(100): step()
pr.disable(); torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(30)
