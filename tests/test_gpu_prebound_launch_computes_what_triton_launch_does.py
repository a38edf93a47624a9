"""Run on the device (`pytest -m gpu`): the public norms with AUTOTUNE_PREBOUND=1 (their planned launches bound once,
`autotune.kernels.common.launch.Prebound`) compute bit for bit what they compute through Triton's own launch, on
repeated calls (the later ones prebound), after the call shape changes, on a misaligned view (which must go back
through Triton), in each dtype, channels-last and with a residual; flash_attn likewise (its Triton engine's launches,
planned per kernel and grid), and the backward launches kept per kernel and grid (rms_norm's, rope's, flash_attn's,
gated_mlp's elementwise step, the Gluon Hopper GEMM's and the Gluon attention's per grid and constexprs) in a forward
and backward through autograd; and the later calls do skip Triton's binding."""

import pytest
import torch
import torch.nn.functional as F

from autotune import runtime
from autotune.kernels import flash_attn, gated_mlp, group_norm, layer_norm, rms_norm
from autotune.kernels.common import launch
from autotune.kernels.rope import rope

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _trained(fn, *params):
    """x -> fn(x, *params)'s outputs and the gradients of x and params from a fixed output gradient, flattened into
    one tensor to compare."""

    def call(x):
        leaves = [t.detach().requires_grad_() for t in (x, *params)]  # x's view (misaligned, sliced) kept
        outputs = fn(*leaves)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        grads = torch.autograd.grad(outputs, leaves, [o.detach().cos() for o in outputs])
        return torch.cat([t.detach().flatten() for t in (*outputs, *grads)])

    return call


def _attention_trained(x):
    """Causal attention of q, k, v = x[:, 0], x[:, 1], x[:, 2] (views kept): its output, dk and dv from a fixed
    output gradient, flattened into one tensor (dq left out: some rows' configs add it up by atomics)."""
    q, k, v = (x[:, i].detach().requires_grad_() for i in range(3))
    o = flash_attn(q, k, v, is_causal=True)
    _, dk, dv = torch.autograd.grad(o, (q, k, v), o.detach().cos())
    return torch.cat([t.detach().flatten() for t in (o, dk, dv)])


def _calls(dtype):
    """(name, inputs maker, call) of each planned public call site, on fresh CUDA tensors of dtype."""
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)

    w320, b320, w4096 = rand(320), rand(320), rand(4096)
    cos, sin = rand(1, 512, 64), rand(1, 512, 64)
    w_gate, w_up, w_down = rand(1024, 512) * 0.05, rand(1024, 512) * 0.05, rand(512, 1024) * 0.05
    llama = (rand(14336, 4096) * 0.02, rand(14336, 4096) * 0.02, rand(4096, 14336) * 0.01)
    return [
        ("group_norm silu", lambda: (rand(2, 320, 64, 64),), lambda x: group_norm(x, 32, w320, b320, 1e-5, "silu")),
        (
            "group_norm channels-last",
            lambda: (rand(2, 320, 16, 16).to(memory_format=torch.channels_last),),
            lambda x: group_norm(x, 32, w320, b320, 1e-5, None),
        ),
        ("layer_norm", lambda: (rand(2, 4096, 320),), lambda x: layer_norm(x, (320,), w320, b320)),
        ("rms_norm", lambda: (rand(4096, 4096),), lambda x: rms_norm(x, (4096,), w4096)),
        ("rms_norm odd rows", lambda: (rand(1000, 4096),), lambda x: rms_norm(x, (4096,), w4096)),
        (
            "rms_norm + residual",  # (y, x + residual), flattened into one tensor to compare
            lambda: (rand(4096, 4096),),
            lambda x: torch.cat([t.flatten() for t in rms_norm(x, (4096,), w4096, residual=x * 0.5)]),
        ),
        (  # q, k and v as views of one tensor: a half batch and a misaligned copy slice all three alike
            "flash_attn causal",
            lambda: (rand(4, 3, 8, 256, 64),),
            lambda x: flash_attn(x[:, 0], x[:, 1], x[:, 2], is_causal=True),
        ),
        (
            "flash_attn decode, grouped heads",
            lambda: (rand(4, 6, 2048, 64),),
            lambda x: flash_attn(x[:, :4, :1], x[:, 4:5], x[:, 5:6], enable_gqa=True),
        ),
        (  # y and dx: a row's dw is summed by atomics in some rows' configs, in no fixed order
            "rms_norm forward and backward",
            lambda: (rand(2048, 4096),),
            lambda x: _trained(lambda x, w: rms_norm(x, (4096,), w), w4096)(x)[: 2 * x.numel()],
        ),
        (
            "rope forward and backward, grouped heads",
            lambda: (rand(2, 10, 512, 64),),
            _trained(lambda x: rope(x[:, :8], x[:, 8:], cos, sin)),
        ),
        ("flash_attn forward and backward, causal", lambda: (rand(4, 3, 8, 256, 64),), _attention_trained),
        (  # head dim 128 at a preset's sequence, whose 16-bit rows run the Gluon kernels: kept per grid and constexprs
            "flash_attn forward and backward, Gluon rows' sizes",
            lambda: (rand(2, 3, 4, 1024, 128),),
            _attention_trained,
        ),
        (
            "gated_mlp forward and backward",
            lambda: (rand(256, 512),),
            _trained(lambda x, wg, wu, wd: gated_mlp(x, wg, wu, wd), w_gate, w_up, w_down),
        ),
        (  # near the Llama buckets, whose rows run the Gluon GEMM: its launches kept per grid and constexprs
            "gated_mlp forward and backward, Gluon rows' sizes",
            lambda: (rand(1024, 4096),),
            _trained(lambda x, wg, wu, wd: gated_mlp(x, wg, wu, wd), *llama),
        ),
    ]


def _run(monkeypatch, flag: str, dtype) -> dict[str, list[torch.Tensor]]:
    monkeypatch.setenv("AUTOTUNE_PREBOUND", flag)
    runtime.clear_cache()  # plans are made anew under the flag
    outputs = {}
    for name, make, call in _calls(dtype):
        (x,) = make()
        misaligned = torch.empty(x.numel() + 1, device="cuda", dtype=dtype)[1:].view_as(x).copy_(x)
        outputs[name] = [call(x).clone(), call(x).clone(), call(x[: x.shape[0] // 2]).clone(), call(x).clone()]
        if not name.endswith("channels-last"):  # a view one element off: not 16-byte aligned
            outputs[name].append(call(misaligned).clone())
    torch.cuda.synchronize()
    return outputs


@pytest.mark.parametrize("dtype", DTYPES)
def test_prebound_calls_compute_bit_for_bit_what_tritons_launch_computes(monkeypatch, dtype):
    through_triton = _run(monkeypatch, "0", dtype)
    prebound = _run(monkeypatch, "1", dtype)
    for name, expected in through_triton.items():
        for i, (want, got) in enumerate(zip(expected, prebound[name])):
            assert torch.equal(want, got), f"{name}, call {i}"
    runtime.clear_cache()


def test_later_calls_skip_tritons_binding(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_PREBOUND", "1")
    runtime.clear_cache()
    bound_before = []
    real_call = launch.Prebound.__call__

    def spy(self, *args, **kwargs):
        bound_before.append(self._bound is not None)
        real_call(self, *args, **kwargs)

    monkeypatch.setattr(launch.Prebound, "__call__", spy)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=x.dtype)
    for _ in range(3):
        y = rms_norm(x, (4096,), w)
    torch.testing.assert_close(y, F.rms_norm(x, (4096,), w), atol=2e-2, rtol=2e-2)
    assert bound_before == [False, True, True]  # through Triton once (binding), straight to the launcher after
    runtime.clear_cache()
