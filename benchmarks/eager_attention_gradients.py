"""flash_attn's eager autograd path against its custom op on a GPU: bf16 and fp16, full and causal with GQA 2:1,
the gradients of both paths compared bit for bit, and each path's and sdpa's largest error against float64.

    python benchmarks/eager_attention_gradients.py
"""
import torch, torch.nn.functional as F
from autotune.kernels import flash_attn
torch.manual_seed(0)
for dtype in (torch.bfloat16, torch.float16):
    for causal, hk in ((False, 4), (True, 2)):
        q = torch.randn(2, 4, 300, 64, device="cuda", dtype=dtype)
        k, v = (torch.randn(2, hk, 333, 64, device="cuda", dtype=dtype) for _ in range(2))
        do = torch.randn(2, 4, 300, 64, device="cuda", dtype=dtype)
        def grads(fn, ts):
            ls = [t.detach().clone().requires_grad_() for t in ts]
            fn(*ls).backward(do.to(ls[0].dtype))
            return [t.grad for t in ls]
        gqa = hk != 4
        eager = grads(lambda *t: flash_attn(*t, is_causal=causal, enable_gqa=gqa), (q, k, v))
        op = grads(lambda *t: torch.ops.autotune.flash_attn(*t, causal, 0.125)[0], (q, k, v))
        ref = grads(lambda *t: F.scaled_dot_product_attention(*t, is_causal=causal, enable_gqa=gqa), (q.double(), k.double(), v.double()))
        half = grads(lambda *t: F.scaled_dot_product_attention(*t, is_causal=causal, enable_gqa=gqa), (q, k, v))
        same = all(torch.equal(a, b) for a, b in zip(eager, op))
        errs = [float((a.double() - r).abs().max()) for a, r in zip(eager, ref)]
        terrs = [float((a.double() - r).abs().max()) for a, r in zip(half, ref)]
        print(dtype, "causal" if causal else "full", "kv_heads", hk, "eager == op:", same, "max err dq dk dv", [f"{e:.3g}" for e in errs], "sdpa's", [f"{e:.3g}" for e in terrs])
