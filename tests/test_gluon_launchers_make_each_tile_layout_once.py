"""The Gluon launchers' TMA descriptors carry Gluon's own shared layout for their tiles, made once per block shape and
dtype (most of a descriptor's host time, six descriptors a GEMM launch), and a plain product hands its one output
descriptor as all three of the kernel's outputs. Host-side argument building only: the kernel itself is stubbed (the
interpreter does not run Gluon; tests/hopper_gemm_compile.py compiles through these launchers with the GPU's Triton)."""

import pytest
import torch

from autotune.kernels.attention import hopper_backward, hopper_forward
from autotune.kernels.gemm import hopper_gemm
from autotune.search_spaces import hopper_gemm_config as cfg

pytestmark = pytest.mark.skipif(hopper_gemm.GLUON_MISSING is not None, reason=str(hopper_gemm.GLUON_MISSING))


def gluon_layout(block, dtype):
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout.get_default_for(block, {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16,
                                                        torch.float32: gl.float32}[dtype])  # fmt: skip


def test_every_launcher_describes_its_tiles_with_one_shared_gluon_layout():
    a, b = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(64, 32, dtype=torch.bfloat16)
    first, second = hopper_gemm._descriptor(a, [128, 64]), hopper_gemm._descriptor(b, [128, 64])
    assert first.layout == gluon_layout([128, 64], torch.bfloat16)
    assert second.layout is first.layout
    half = hopper_gemm._descriptor(a.half(), [128, 64]).layout
    assert half == gluon_layout([128, 64], torch.float16)
    q = torch.empty(2, 4, 256, 128, dtype=torch.float16)
    assert hopper_forward._descriptor(q, 128).layout == gluon_layout([1, 1, 128, 128], torch.float16)
    assert hopper_forward._descriptor(q[:1], 128).layout is hopper_forward._descriptor(q, 128).layout
    dq = torch.empty(2, 4, 256, 128, dtype=torch.float32)
    assert hopper_backward._float32_descriptor(dq, 64).layout == gluon_layout([1, 1, 64, 128], torch.float32)


class _Recorder:
    """Stands in for the kernel: `kernel[grid](*args, **constexprs)` records the arguments."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **constexprs: self.calls.append(args)


def test_a_plain_product_passes_one_output_descriptor_and_a_gated_one_three(monkeypatch):
    kernel = _Recorder()
    monkeypatch.setattr(hopper_gemm, "_hopper_gemm_kernel", kernel)
    a, b = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 192, dtype=torch.bfloat16)
    c = torch.empty(256, 192, dtype=torch.bfloat16)
    hopper_gemm.launch_matmul(a, b, c, dict(cfg.DEFAULT_CONFIG))
    c_desc, g_desc, u_desc = kernel.calls[-1][3:6]
    assert c_desc is g_desc is u_desc and c_desc.base is c

    w = torch.empty(192, 128, dtype=torch.bfloat16)
    h, gu = torch.empty(256, 192, dtype=torch.bfloat16), torch.empty(256, 384, dtype=torch.bfloat16)
    hopper_gemm.launch_gated(a, w, w, h, gu, "silu", dict(cfg.DEFAULT_GATED_CONFIG))
    outs = kernel.calls[-1][3:6]
    assert [d.base.data_ptr() for d in outs] == [h.data_ptr(), gu.data_ptr(), gu[:, 192:].data_ptr()]
    assert all(d.shape == [256, 192] for d in outs)
    hopper_gemm.launch_gated(a, w, w, h, None, "silu", dict(cfg.DEFAULT_GATED_CONFIG))
    h_desc, g_desc, u_desc = kernel.calls[-1][3:6]
    assert h_desc is g_desc is u_desc and h_desc.base is h


def test_the_attention_backwards_kernels_share_one_descriptor_per_tensor_and_tile(monkeypatch):
    # Its per-row pass, delta recomputed by the dQ kernel, dK/dV, then dQ: q, k, v and dO described once a call.
    from autotune.kernels.attention import hopper_backward_dq

    rows, dq_kernel, dkdv = _Recorder(), _Recorder(), _Recorder()
    monkeypatch.setattr(hopper_backward, "_rows_kernel", rows)
    monkeypatch.setattr(hopper_backward_dq, "_attn_bwd_dq_kernel", dq_kernel)
    monkeypatch.setattr(hopper_backward, "_attn_bwd_dkdv_kernel", dkdv)
    q, k, v, o, do = (torch.empty(1, 2, 128, 64, dtype=torch.bfloat16) for _ in range(5))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    config = {**hopper_backward.DEFAULT_CONFIG, "DQ": "separate", "DELTA": "recomputed"}
    assert config["BLOCK_M"] == config["BLOCK_N"]  # the dK/dV and dQ kernels' tiles of q, k, v, dO are one height
    hopper_backward.launch(do, q, k, v, o, torch.empty(1, 2, 128), dq, dk, dv, True, 0.125, config)
    (delta_pass, dq_pass), (dkdv_pass,) = dq_kernel.calls, dkdv.calls
    for pass_ in (delta_pass, dq_pass):  # the dQ kernel takes q, dO, dq, k, v
        assert [pass_[i] for i in (0, 1, 3, 4)] == [dkdv_pass[i] for i in (0, 3, 1, 2)]
        assert all(pass_[i] is dkdv_pass[j] for i, j in ((0, 0), (1, 3), (3, 1), (4, 2)))
    descriptors = {id(a) for call in (delta_pass, dkdv_pass, dq_pass) for a in call if hasattr(a, "block_shape")}
    assert len(descriptors) == 8  # q, k, v, dO, dK, dV, dQ's float32 accumulator, dQ
