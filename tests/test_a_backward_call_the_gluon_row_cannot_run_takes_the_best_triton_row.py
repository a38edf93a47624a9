"""A flash_attn_backward call whose bucket's row runs the Gluon engine, but that the Gluon kernel cannot take (here:
tensors on the CPU; on a GPU, a view TMA cannot address), launches the best stored Triton config instead: its
bucket's own Triton row (one of the space the engine extends, which the Gluon row shadows), else the default."""

import pytest
import torch
from stored_rows import store_best

import autotune
from autotune import runtime
from autotune.kernels.attention import flash_attn_backward as fab
from autotune.kernels.attention import problems as problems_
from autotune.kernels.attention import reference
from autotune.search_spaces import flash_attn_backward_gluon as engine
from autotune.search_spaces import flash_attn_gluon as forward_engine
from autotune.search_spaces.flash_attn import BACKWARD_SPACE

GLUON_ROW = {
    **engine.GLUON_FIXED,
    "engine": "gluon",
    "BLOCK_M": 64,
    "BLOCK_N": 64,
    "num_stages": 2,
    "NUM_CONSUMERS": 2,
    "CONSUMER_REGISTERS": 240,
    "dq": "atomic",
    "ds": "rounded",
    "dv": "rounded",
    "delta": "recomputed",
    "EARLY_DP": False,
    "PINGPONG": False,
}
TRITON_ROW = {
    **{k: v for k, v in BACKWARD_SPACE.default.items() if k not in engine.TRITON and k != "dv"},
    "BLOCK_M": 32,
    "BLOCK_N": 32,
    "num_warps": 4,
}
"""A config stored before the engine existed (no Gluon keys, no dv), not the default."""
PROBLEM = problems_.problem(1, 2, 130, 64, causal=True)


@pytest.fixture
def hopper(monkeypatch):
    """The constraints as on a Hopper GPU: the Gluon row is this bucket's config; the kernel still refuses the call."""
    monkeypatch.setattr(forward_engine, "unavailable", lambda: None)


def plant(path, config: dict, source_hash: str) -> None:
    spec = autotune.get("flash_attn_backward")
    store_best(path, spec, spec.bucket(PROBLEM), config, "fp16", {**PROBLEM, "dtype": "fp16"}, source_hash)


def gradients() -> tuple[list, tuple, tuple]:
    """The tuned backward's (dq, dk, dv) of a causal fp16 call, the launches it made, and float64 sdpa's."""
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(1, 2, 130, 64, generator=gen).to(torch.float16) for _ in range(4))
    o, lse = reference.reference_forward({"q": q, "k": k, "v": v, "is_causal": True, "scale": 0.125})
    runtime.clear_cache()
    with runtime.record_launches() as launches:
        grads = fab.backward(do, q, k, v, o.to(torch.float16), lse.to(torch.float32), True, 0.125)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True, scale=0.125)
    expected = torch.autograd.grad(out, leaves, do.double())
    return launches, grads, expected


@pytest.mark.parametrize("with_triton_row", [True, False], ids=["its-triton-row", "no-triton-row"])
def test_the_gluon_rows_call_launches_the_best_triton_config(hopper, user_db, with_triton_row):
    spec = autotune.get("flash_attn_backward")
    plant(user_db, GLUON_ROW, spec.source_hash)
    if with_triton_row:
        plant(user_db, TRITON_ROW, spec.extends[0].source_hash)
    resolved = fab._TUNED.resolve(torch.float16, spec.bucket(PROBLEM), PROBLEM).config
    assert resolved == BACKWARD_SPACE.validate(GLUON_ROW)
    launches, grads, expected = gradients()
    want = spec.extends[0].complete(TRITON_ROW) if with_triton_row else dict(BACKWARD_SPACE.default)
    assert launches == [("flash_attn_backward", want)]
    for got, ref in zip(grads, expected):
        torch.testing.assert_close(got.double(), ref, atol=2e-2, rtol=2e-2)


def test_a_gluon_config_launched_where_the_kernel_cannot_run_raises_naming_why():
    q, k, v, do, o = (torch.randn(1, 2, 130, 64, dtype=torch.float16) for _ in range(5))
    lse = torch.zeros(1, 2, 130)
    grads = [torch.empty_like(t) for t in (q, k, v)]
    with pytest.raises(ValueError, match="engine=gluon cannot run this call: q is on the cpu"):
        fab.launch(do, q, k, v, o, lse, *grads, True, 0.125, BACKWARD_SPACE.validate(GLUON_ROW))
    with pytest.raises(ValueError, match=r"reads a \(B, Hq, Nq\) float32 log-sum-exp"):
        fab.launch(do, q, k, v, o, lse.double(), *grads, True, 0.125, BACKWARD_SPACE.validate(GLUON_ROW))


def test_without_gluon_rows_a_call_launches_its_buckets_row_as_before(user_db):
    plant(user_db, TRITON_ROW, autotune.get("flash_attn_backward").extends[0].source_hash)
    launches, grads, expected = gradients()
    assert launches == [("flash_attn_backward", autotune.get("flash_attn_backward").extends[0].complete(TRITON_ROW))]
    for got, ref in zip(grads, expected):
        torch.testing.assert_close(got.double(), ref, atol=2e-2, rtol=2e-2)
