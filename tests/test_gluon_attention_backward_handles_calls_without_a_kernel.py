"""The Gluon attention backward's launch answers, without a kernel (so on this CPU too), the calls whose gradients
are exact: no query or no key (every gradient 0), and one key per query (Nk = 1, or causal with Nq = 1: dq = dk = 0
exactly, dv of key 0 is dO summed over each key head's queries), as flash_attn_backward.launch does."""

import pytest
import torch

from autotune.kernels.attention import hopper_backward, reference


def _call(batch, heads, kv_heads, nq, nk, causal):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, nq, 64, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(batch, kv_heads, nk, 64, generator=gen).to(torch.bfloat16) for _ in range(2))
    do = torch.randn(q.shape, generator=gen).to(torch.bfloat16)
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]  # every element must be written
    o, lse = torch.zeros_like(q), torch.zeros(q.shape[:3])
    kernels = hopper_backward.launch(do, q, k, v, o, lse, *grads, causal, 0.125, hopper_backward.DEFAULT_CONFIG)
    inputs = {"q": q, "k": k, "v": v, "do": do, "scale": 0.125, "is_causal": causal}
    return kernels, grads, reference.reference_backward(inputs)


@pytest.mark.parametrize(
    "batch, heads, kv_heads, nq, nk, causal",
    [(2, 4, 2, 5, 1, False), (1, 4, 1, 1, 9, True), (2, 2, 2, 3, 1, True)],
)
def test_one_key_a_query_gives_exact_gradients(batch, heads, kv_heads, nq, nk, causal):
    kernels, grads, expected = _call(batch, heads, kv_heads, nq, nk, causal)
    assert kernels == {"delta": None, "dkdv": None, "dq": None}
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2)
    assert not grads[0].any() and not grads[1].any()  # exactly 0, not rounding noise


@pytest.mark.parametrize("nq, nk", [(0, 5), (5, 0)])
def test_no_query_or_no_key_gives_zero_gradients(nq, nk):
    kernels, grads, _ = _call(1, 2, 1, nq, nk, False)
    assert kernels == {"delta": None, "dkdv": None, "dq": None}
    assert all(not g.isnan().any() and not g.any() for g in grads)
