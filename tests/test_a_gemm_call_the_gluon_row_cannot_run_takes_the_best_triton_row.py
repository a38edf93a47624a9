"""A matmul, linear or gated_mlp call whose bucket's row runs the Gluon engine, but that the Gluon kernel cannot take
(here: tensors on the CPU; on a GPU, a bias, an activation, a view TMA cannot read), launches the best stored Triton
config instead: its bucket's own Triton row (one of the space the engine extends, which the Gluon row shadows), else
the default. The gated MLP's training step, whose backward products go through matmul, takes the same way."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from stored_rows import store_best

import autotune
from autotune import runtime
from autotune.kernels.gemm import gluon_engine
from autotune.kernels.gemm.gated_mlp import gated_mlp
from autotune.kernels.gemm.matmul import linear, matmul
from autotune.search_spaces import gemm_gluon as gluon

M, K, N, H = 40, 48, 56, 64
SMALL_GLUON = {"engine": "gluon", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "num_stages": 2,
               "NUM_CONSUMERS": 1, "SCHEDULE": "cooperative", "CONSUMER_REGISTERS": 232}  # fmt: skip
"""A Gluon config the constraints admit on these small buckets (one consumer's 64 rows, 64 columns)."""
TRITON_ROWS = {
    "matmul": {"variant": "tiled", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 2,
               "num_stages": 2, "SPLIT_K": 1},
    "gated_mlp": {"variant": "tiled", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 2,
                  "num_stages": 2},
}  # fmt: skip
"""Configs stored before the engine existed (no Gluon keys), not the defaults."""
TRITON_ROWS["linear"] = TRITON_ROWS["matmul"]


@pytest.fixture
def hopper(monkeypatch):
    """The constraints as on a Hopper GPU: the Gluon row is its bucket's config; the kernel still refuses the call."""
    monkeypatch.setattr(gluon, "unavailable", lambda: None)


def plant(path, kernel: str, problem: dict, with_triton_row: bool) -> None:
    spec = autotune.get(kernel)
    fixed = gluon.GATED_FIXED if kernel == "gated_mlp" else gluon.MATMUL_FIXED
    gluon_config = {**fixed, **SMALL_GLUON}
    assert spec.space.rejects(spec.space.validate(gluon_config), {**problem, "dtype": "fp16"}) is None
    store_best(path, spec, spec.bucket(problem), gluon_config, dtype="fp16", problem={**problem, "dtype": "fp16"})
    if with_triton_row:
        triton_config = spec.space.validate(spec.extends[0].complete(TRITON_ROWS[kernel]))
        assert spec.space.rejects(triton_config, {**problem, "dtype": "fp16"}) is None
        store_best(path, spec, spec.bucket(problem), TRITON_ROWS[kernel], dtype="fp16",
                   problem={**problem, "dtype": "fp16"}, source_hash=spec.extends[0].source_hash)  # fmt: skip


def expected(kernel: str, with_triton_row: bool) -> dict:
    spec = autotune.get(kernel)
    return {**TRITON_ROWS[kernel], **gluon.TRITON} if with_triton_row else dict(spec.space.default)


def halves(*shapes):
    torch.manual_seed(0)
    return [torch.randn(*s, dtype=torch.float16) / s[-1] ** 0.5 for s in shapes]


@pytest.mark.parametrize("with_triton_row", [True, False], ids=["its-triton-row", "no-triton-row"])
def test_a_matmul_and_a_linear_call_launch_the_best_triton_config(hopper, user_db, with_triton_row):
    plant(user_db, "matmul", {"m": M, "k": K, "n": N, "batch": 0}, with_triton_row)
    plant(user_db, "linear", {"m": M, "k": K, "n": N, "batch": 0}, with_triton_row)
    a, b, w = halves((M, K), (K, N), (N, K))
    assert gluon_engine.matmul_refuses(a, b, {**gluon.MATMUL_FIXED, **SMALL_GLUON}).startswith("a is on the cpu")
    with runtime.record_launches() as launches:
        y = matmul(a, b)
        z = linear(a, w)
    assert launches == [(kernel, expected(kernel, with_triton_row)) for kernel in ("matmul", "linear")]
    torch.testing.assert_close(y.double(), a.double() @ b.double(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(z.double(), F.linear(a.double(), w.double()), atol=2e-3, rtol=2e-3)


@pytest.mark.filterwarnings("ignore::autotune.runtime.NoTunedConfigsWarning")  # linear's and the backward step's
@pytest.mark.parametrize("with_triton_row", [True, False], ids=["its-triton-row", "no-triton-row"])
def test_the_gated_mlps_training_step_launches_the_best_triton_configs(hopper, user_db, with_triton_row):
    plant(user_db, "gated_mlp", {"m": M, "k": K, "h": H, "n": N}, with_triton_row)
    # The backward's products: dy^T @ h, dy @ w_down, dg @ w_gate (all in one bucket here) and [dg | du]^T @ x.
    for problem in ({"m": N, "k": M, "n": H}, {"m": 2 * H, "k": M, "n": K}):
        plant(user_db, "matmul", {**problem, "batch": 0}, with_triton_row)
    x, w_gate, w_up, w_down = halves((M, K), (H, K), (H, K), (N, H))
    params = [t.requires_grad_() for t in (x, w_gate, w_up, w_down)]
    with runtime.record_launches() as launches:
        gated_mlp(*params).float().square().sum().backward()
    kernels = {name for name, _ in launches}
    assert {"gated_mlp", "matmul"} <= kernels
    assert all(config["engine"] == "triton" for name, config in launches if name != "gated_mlp_backward")
    assert ("gated_mlp", expected("gated_mlp", with_triton_row)) in launches
    assert ("matmul", expected("matmul", with_triton_row)) in launches
    x64, g64, u64, d64 = (t.detach().double().requires_grad_() for t in params)
    (F.linear(F.silu(F.linear(x64, g64)) * F.linear(x64, u64), d64)).square().sum().backward()
    for ours, theirs in zip(params, (x64, g64, u64, d64)):
        torch.testing.assert_close(ours.grad.double(), theirs.grad, atol=5e-3, rtol=2e-2)
