"""linear and mlp with K = 0 (x of shape (*, 0)) return what torch returns, the bias (activated) broadcast
over the rows or zeros, with torch's gradients; they used to crash in reshape(-1, 0)."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from autotune.kernels import linear, mlp
from autotune.search_spaces import mlp as mlp_space

pytestmark = [pytest.mark.usefixtures("user_db"), pytest.mark.filterwarnings("ignore::RuntimeWarning")]

_mlp_module = sys.modules["autotune.kernels.gemm.mlp"]


@pytest.mark.parametrize("bias", (True, False), ids=("bias", "nobias"))
@pytest.mark.parametrize("activation", (None, "gelu"))
def test_linear_with_empty_k_is_torchs(activation, bias):
    x, w = torch.randn(2, 3, 0, requires_grad=True), torch.randn(4, 0, requires_grad=True)
    b = torch.randn(4, requires_grad=True) if bias else None
    y = linear(x, w, b, activation)
    want = F.linear(x, w, b)
    want = F.gelu(want) if activation else want
    torch.testing.assert_close(y, want)
    assert y.shape == (2, 3, 4)
    leaves = [t for t in (x, w, b) if t is not None]
    g = torch.randn(2, 3, 4)
    for got, expected in zip(torch.autograd.grad(y, leaves, g), torch.autograd.grad(want, leaves, g)):
        torch.testing.assert_close(got, expected)


def test_mlp_with_empty_k_is_torchs():
    x, w1, b1, w2, b2 = (torch.randn(*shape, requires_grad=True) for shape in ((5, 0), (6, 0), (6,), (3, 6), (3,)))
    y = mlp(x, w1, b1, w2, b2, "silu")
    want = F.linear(F.silu(F.linear(x, w1, b1)), w2, b2)
    torch.testing.assert_close(y, want)
    leaves = (x, w1, b1, w2, b2)
    g = torch.randn(5, 3)
    for got, expected in zip(torch.autograd.grad(y, leaves, g), torch.autograd.grad(want, leaves, g)):
        torch.testing.assert_close(got, expected)
    assert mlp(torch.randn(2, 4, 0), w1.detach(), None, w2.detach(), None).shape == (2, 4, 3)


@pytest.mark.parametrize("variant", ("two_pass", "fused"))
def test_both_mlp_variants_launch_with_empty_k(variant):
    config = (
        mlp_space.SPACE.with_overrides(variant="fused", BLOCK_M=32, BLOCK_N=16, BLOCK_H=32, BLOCK_K=32)
        if variant == "fused"
        else dict(mlp_space.DEFAULT)
    )
    x, w1, b1, w2, b2 = torch.randn(5, 0), torch.randn(6, 0), torch.randn(6), torch.randn(3, 6), torch.randn(3)
    y = _mlp_module._run(x, w1, b1, w2, b2, "gelu_tanh", config)
    torch.testing.assert_close(y, F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2))
