"""What a kernel is measured against besides its own configs: PyTorch as a model calls it, Liger-Kernel's op for it
(an optional extra), and a device copy of the bytes it must move; and each of them as one training step does it,
forward and backward through autograd."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

import torch
import torch.nn.functional as F

from autotune import gpu
from autotune.spec import Inputs, KernelSpec

Outputs = torch.Tensor | tuple[torch.Tensor, ...]
LIGER_MISSING = "liger-kernel is not installed (pip install 'autotune[liger]')"
LIGER_KERNELS = ("softmax", "layer_norm", "rms_norm", "gated_mlp")
"""The kernels Liger-Kernel has an op for (`liger_function`)."""


class PeerUnavailable(LookupError):
    """A peer has nothing to run for this kernel, problem or machine; the message says why."""


def torch_function(spec: KernelSpec) -> Callable[[Inputs], Outputs]:
    """PyTorch eager as a model calls the op, returning what the public function returns: the spec's baseline,
    but group_norm's, which also returns the statistics its kernels save (F.group_norm, then the activation)."""
    if spec.name == "group_norm":

        def group_norm(inputs: Inputs) -> torch.Tensor:
            y = F.group_norm(inputs["x"], inputs["groups"], inputs["weight"], inputs["bias"], inputs["eps"])
            return {"silu": F.silu, "mish": F.mish}.get(inputs["activation"], lambda t: t)(y)

        return group_norm
    return spec.baseline


def liger_function(name: str, inputs: Inputs) -> Callable[[Inputs], Outputs]:
    """Liger-Kernel's op for kernel `name` on these inputs (softmax: LigerSoftmaxFunction; layer_norm:
    LigerLayerNormFunction; rms_norm: LigerRMSNormFunction; a residual added first, as a model adds it; gated_mlp:
    its SwiGLU or GeGLU MLP); PeerUnavailable where Liger-Kernel is not installed, runs only on CUDA, or has no
    such op."""
    if importlib.util.find_spec("liger_kernel") is None:
        raise PeerUnavailable(LIGER_MISSING)
    if not _liger_runs_here():
        raise PeerUnavailable("Liger-Kernel runs on CUDA GPUs only")
    if name == "softmax":
        if inputs["dim"] % max(inputs["x"].dim(), 1) != inputs["x"].dim() - 1:
            raise PeerUnavailable("Liger-Kernel's softmax takes the last dim only")
        apply = _liger("softmax", "LigerSoftmaxFunction").apply
        return lambda i: apply(i["x"])
    if name in ("layer_norm", "rms_norm"):
        if len(inputs["normalized_shape"]) != 1:
            raise PeerUnavailable(f"Liger-Kernel's {name} normalizes the last dim only")
        if inputs["weight"] is None or (name == "layer_norm" and inputs["bias"] is None):
            raise PeerUnavailable(f"Liger-Kernel's {name} takes the affine parameters")
        if name == "layer_norm":
            apply = _liger("layer_norm", "LigerLayerNormFunction").apply

            def norm(i: Inputs, h: torch.Tensor) -> torch.Tensor:
                return apply(h, i["weight"], i["bias"], i["eps"])
        else:
            apply = _liger("rms_norm", "LigerRMSNormFunction").apply

            def norm(i: Inputs, h: torch.Tensor) -> torch.Tensor:
                # offset 0, Llama's casting, dx in its own tensor: dY, which autograd may reuse, stays as it is.
                return apply(h, i["weight"], i["eps"], 0.0, "llama", False)

        def with_residual(i: Inputs) -> Outputs:
            if i["residual"] is None:
                return norm(i, i["x"])
            h = i["x"] + i["residual"]
            return norm(i, h), h

        return with_residual
    if name == "gated_mlp":
        return _liger_gated_mlp(inputs["activation"])
    raise PeerUnavailable(f"no Liger-Kernel op is compared for {name}")


def _liger_gated_mlp(activation: str) -> Callable[[Inputs], Outputs]:
    """LigerSwiGLUMLP's (LigerGEGLUMLP's) forward: torch's three F.linear calls around Liger's fused act(g) * u."""
    if activation not in ("silu", "gelu_tanh"):
        raise PeerUnavailable("Liger-Kernel's gated MLPs gate with silu (SwiGLU) or gelu_tanh (GeGLU)")
    module, attr = ("swiglu", "LigerSiLUMulFunction") if activation == "silu" else ("geglu", "LigerGELUMulFunction")
    apply = _liger(module, attr).apply

    def gated_mlp(i: Inputs) -> torch.Tensor:
        gate, up = F.linear(i["x"], i["w_gate"], i["b_gate"]), F.linear(i["x"], i["w_up"], i["b_up"])
        return F.linear(apply(gate, up), i["w_down"], i["b_down"])

    return gated_mlp


def _liger_runs_here() -> bool:
    return gpu.device().type == "cuda"


def _liger(module: str, attr: str):
    try:
        return getattr(importlib.import_module(f"liger_kernel.ops.{module}"), attr)
    except (ImportError, AttributeError) as exc:
        raise PeerUnavailable(f"Liger-Kernel has no {attr} here ({type(exc).__name__}: {exc})") from None


def copy_call(nbytes: float, device: torch.device) -> Callable[[], torch.Tensor]:
    """A device copy moving nbytes (half read, half written): the rate the memory allows a kernel that must
    move those bytes."""
    src = torch.empty(max(1, int(nbytes) // 2), dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def training_step(fn: Callable[[Inputs], Outputs], inputs: Inputs, seed: int = 0) -> Callable[[], tuple]:
    """fn's forward and backward on `inputs`, as a training step runs them: every floating-point input tensor a
    leaf that requires grad (x, weight, bias, residual, ...), a fixed random gradient for each output fn returns,
    and autograd's gradients of all the leaves returned (not accumulated into .grad: no extra kernels)."""
    leaves = {
        k: v.detach().requires_grad_()
        for k, v in inputs.items()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    }
    live = {**inputs, **leaves}
    outputs = _as_tuple(fn(live))
    gen = torch.Generator().manual_seed(seed)
    grads = [torch.randn(o.shape, generator=gen).to(device=o.device, dtype=o.dtype) for o in outputs]
    wanted = list(leaves.values())

    def step() -> tuple:
        outs = _as_tuple(fn(live))
        pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
        return torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)

    return step


def _as_tuple(outputs: Outputs) -> tuple[torch.Tensor, ...]:
    return (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
