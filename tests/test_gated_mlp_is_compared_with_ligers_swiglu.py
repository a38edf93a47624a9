"""`--against liger` compares gated_mlp with Liger-Kernel's SwiGLU (silu) and GeGLU (gelu_tanh) MLPs: torch's three
F.linear calls around Liger's fused act(g) * u, giving torch's result; for other activations Liger has no op and
says so. Liger-Kernel runs on CUDA only: a stand-in package of torch arithmetic plays it here."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from autotune.kernels.gemm.gated_mlp import GATED_MLP
from autotune.measure import peers


@pytest.fixture
def fake_liger(tmp_path, monkeypatch):
    """A stand-in liger_kernel package on sys.path with Liger's two gated products, counting their calls."""
    ops = tmp_path / "liger_kernel" / "ops"
    ops.mkdir(parents=True)
    (tmp_path / "liger_kernel" / "__init__.py").write_text("CALLS = []\n")
    (ops / "__init__.py").write_text("")
    for module, name, act in (
        ("swiglu", "LigerSiLUMulFunction", "F.silu(a)"),
        ("geglu", "LigerGELUMulFunction", "F.gelu(a, approximate='tanh')"),
    ):
        (ops / f"{module}.py").write_text(
            textwrap.dedent(f"""
            import torch.nn.functional as F
            import liger_kernel


            class {name}:
                @staticmethod
                def apply(a, b):
                    liger_kernel.CALLS.append("{name}")
                    return {act} * b
            """)
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(peers, "_liger_runs_here", lambda: True)
    forget_liger()  # another test's stand-in, if one is still imported
    import liger_kernel

    yield liger_kernel.CALLS
    forget_liger()


def forget_liger() -> None:
    """Drop every imported liger_kernel module, for good (monkeypatch would put them back as it undoes its changes)."""
    for name in [m for m in sys.modules if m.startswith("liger_kernel")]:
        del sys.modules[name]


def test_ligers_swiglu_and_geglu_mlps_give_torchs_result(fake_liger):
    for activation, op in (("silu", "LigerSiLUMulFunction"), ("gelu_tanh", "LigerGELUMulFunction")):
        problem = {**GATED_MLP.parse_shape(f"9x16x24x8,bias,{activation}"), "lead": [3, 3]}
        inputs = GATED_MLP.make_inputs(problem, torch.float32, torch.device("cpu"), 0)
        torch.testing.assert_close(peers.liger_function("gated_mlp", inputs)(inputs), GATED_MLP.baseline(inputs))
        assert fake_liger[-1] == op
    inputs = GATED_MLP.make_inputs(GATED_MLP.parse_shape("9x16x24x8,gelu"), torch.float32, torch.device("cpu"), 0)
    with pytest.raises(peers.PeerUnavailable, match="silu .SwiGLU. or gelu_tanh .GeGLU."):
        peers.liger_function("gated_mlp", inputs)
