"""rope and rope_backward (transformers' rotary embedding of q and k, and its transpose) pass the float64 gate in
every layout their configs run on: odd positions, grouped key heads, head dims of 64, 128 and halves that are not
powers of two, cos and sin per sequence or shared, transposed views of a projection read in place; the gate's
poisoned outputs catch a wrong rotation; the public function's gradients are exact (gradcheck and gradgradcheck in
float64) and it refuses what it does not compute with a clear error."""

from __future__ import annotations

import pytest
import torch

from autotune.gate.verify import check_problem, verify
from autotune.kernels.rope import ROPE, ROPE_BACKWARD, rope
from autotune.kernels.rope.problems import eager, problem
from autotune.search_spaces.rope import SPACE

pytestmark = pytest.mark.usefixtures("user_db")  # public calls read a fresh, empty user database: the default config

CONFIGS = {
    "default": dict(SPACE.default),
    "loop_2": SPACE.with_overrides(variant="loop", BLOCK_H=2, num_warps=1, num_stages=2),
    "split_1": SPACE.with_overrides(variant="split", BLOCK_H=1, num_warps=1, num_stages=1),
    "split_4": SPACE.with_overrides(variant="split", BLOCK_H=4, num_warps=2, num_stages=1),
}
EDGES = [
    problem(1, 3, 7, 64, kv_heads=1, layout="transposed"),  # odd N, grouped heads, a projection's transposed view
    problem(2, 4, 5, 128, kv_heads=2, cos_batch=2, layout="fused", values="random"),  # one cos/sin per sequence
    problem(2, 2, 3, 80, kv_heads=3, layout="strided", magnitude=1e3),  # Hk > H; a head dim of stride 2 (copied)
    problem(1, 4, 9, 96, kv_heads=4, cos_batch=1, values="random"),
    problem(3, 1, 1, 2, kv_heads=1),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("spec", [ROPE, ROPE_BACKWARD], ids=["rope", "rope_backward"])
@pytest.mark.parametrize("name", CONFIGS)
def test_configs_pass_the_float64_gate(name, spec, dtype):
    edges = [p for p in EDGES if SPACE.rejects(CONFIGS[name], p) is None]
    assert len(edges) >= 3
    result = verify(spec, CONFIGS[name], dtype, examples=6, max_numel=600, seed=1, extra_problems=edges)
    assert result.passed, result.failure and result.failure.describe()


def test_a_wrong_rotation_fails_the_gate(monkeypatch):
    # The backward's rotation in the forward's place (sin's sign and halves swapped) is caught by the gate.
    from autotune.kernels.rope import kernel

    launch = kernel.launch
    monkeypatch.setattr(kernel, "launch", lambda *a, backward, **k: launch(*a, backward=not backward, **k))
    failure = check_problem(ROPE, dict(SPACE.default), EDGES[0], torch.float32)
    assert failure is not None and failure.kind == "incorrect"
    assert check_problem(ROPE_BACKWARD, dict(SPACE.default), EDGES[0], torch.float32) is not None


def test_a_transposed_view_is_read_in_place_and_the_output_keeps_its_layout():
    base = torch.randn(2, 7, 4 + 2 * 2, 10)  # a fused projection's (B, N, H + 2 Hk, D) output
    q, k = base[:, :, :4].transpose(1, 2), base[:, :, 4:6].transpose(1, 2)
    cos, sin = torch.randn(2, 7, 10), torch.randn(2, 7, 10)
    ours = rope(q, k, cos, sin)
    for got, want in zip(ours, eager(q.double(), k.double(), cos.double(), sin.double())):
        torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)
    assert ours[0].transpose(1, 2).is_contiguous()  # (B, N, H, D) memory, as eager's elementwise ops give


def test_gradcheck_and_gradgradcheck_in_float64():
    gen = torch.Generator().manual_seed(0)
    # Two batches, two query heads on one key head, q transposed: small, as each input element costs launches here.
    q = torch.randn(2, 2, 3, 4, generator=gen, dtype=torch.float64).transpose(1, 2).contiguous().transpose(1, 2)
    k = torch.randn(2, 1, 3, 4, generator=gen, dtype=torch.float64)
    cos, sin = torch.rand(1, 3, 4, generator=gen, dtype=torch.float64), torch.rand(1, 3, 4, dtype=torch.float64)
    q.requires_grad_(), k.requires_grad_()

    def f(q, k):
        return rope(q, k, cos, sin)

    assert torch.autograd.gradcheck(f, (q, k))
    # The second order goes through the backward's torch ops (create_graph records a graph), not the kernel.
    assert torch.autograd.gradgradcheck(f, (q, k))


def test_only_ks_gradient_flows_when_only_k_requires_one():
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 1, 3, 4, requires_grad=True)
    cos, sin = torch.randn(1, 3, 4), torch.randn(1, 3, 4)
    _, k_out = rope(q, k, cos, sin)
    g = torch.randn_like(k_out)
    (dk,) = torch.autograd.grad(k_out, k, g)
    k64 = k.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(eager(q.double(), k64, cos.double(), sin.double())[1], k64, g.double())
    torch.testing.assert_close(dk.double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "args, error, match",
    [
        (((1, 2, 3, 5), (1, 1, 3, 5), (1, 3, 5)), ValueError, "head dim must be even"),
        (((1, 2, 3, 4), (1, 1, 4, 4), (1, 3, 4)), ValueError, "k must have q's batch"),
        (((2, 2, 3, 4), (2, 1, 3, 4), (3, 3, 4)), ValueError, r"cos must have shape \(1 or 2, 3, 4\)"),
        (((2, 3, 4), (2, 3, 4), (3, 4)), ValueError, "q and k must be 4-D"),
    ],
)
def test_bad_arguments_are_named_before_any_launch(args, error, match):
    q, k, cos = (torch.randn(*s) for s in args)
    with pytest.raises(error, match=match):
        rope(q, k, cos, cos.clone())


def test_mixed_dtypes_and_differentiable_angles_are_refused():
    q, k, cos = torch.randn(1, 2, 3, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 3, 4)
    with pytest.raises(TypeError, match="one dtype"):
        rope(q, k.half(), cos, cos)
    with pytest.raises(ValueError, match="does not differentiate cos and sin"):
        rope(q, k, cos.requires_grad_(), cos)
