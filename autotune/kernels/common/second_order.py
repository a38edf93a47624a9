"""Second-order gradients of kernels whose backward is a Triton kernel, which autograd cannot differentiate.

Where autograd records the backward itself (create_graph=True, so grad mode is on inside it), such a kernel
either recomputes its first-order gradients with torch's differentiable ops (`torch_gradients`), or returns
them through a node that raises, naming the kernel, if they are differentiated (`refuse`). Never gradients
without a graph: those make a gradient penalty silently add nothing. A plain backward reaches neither.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def recording() -> bool:
    """Whether the running backward is itself recorded (create_graph=True): grad mode is on inside it."""
    return torch.is_grad_enabled()


def torch_gradients(forward: Callable[..., torch.Tensor], grad_output: torch.Tensor,
                    inputs: Sequence[torch.Tensor | None]) -> tuple[torch.Tensor | None, ...]:
    """The gradients of forward(*inputs) at grad_output, as a graph (create_graph=True), for the inputs that
    require grad; None for the others. forward is torch's version of the kernel, so the result is torch's
    first-order gradient and autograd's own second order."""
    # Differentiated at fresh aliases: the kernel's own node may lie between torch's forward and an input
    # (a saved output such as the residual sum h), and autograd.grad at the input itself would run that
    # node's backward, which is where this runs.
    inputs = [t.view_as(t) if t is not None and t.requires_grad else t for t in inputs]
    wanted = [t for t in inputs if t is not None and t.requires_grad]
    if not wanted:
        return (None,) * len(inputs)
    y = forward(*inputs)
    grads = iter(torch.autograd.grad(y, wanted, grad_output.to(y.dtype), create_graph=True))
    return tuple(next(grads) if t is not None and t.requires_grad else None for t in inputs)


class _SecondOrderRefused(torch.autograd.Function):
    """Passes gradients through unchanged, recorded as functions of the tensors they were computed from;
    differentiating them raises NotImplementedError(message)."""

    @staticmethod
    def forward(ctx, message: str, count: int, *tensors: torch.Tensor):
        ctx.message = message
        return tensors[:count]

    @staticmethod
    def backward(ctx, *_):
        raise NotImplementedError(ctx.message)


def refuse(kernel: str, grads: Sequence[torch.Tensor | None], computed_from: Sequence[torch.Tensor],
           alternative: str) -> tuple[torch.Tensor | None, ...]:
    """grads (computed from computed_from by a Triton backward, so without a graph), recorded on a node that
    raises a clear error, naming the kernel, at a second backward through them."""
    message = (f"autotune.kernels.{kernel}: second-order gradients are not supported (its backward is a Triton "
               f"kernel with no derivative of its own); {alternative}")
    present = [g for g in grads if g is not None]
    passed = iter(_SecondOrderRefused.apply(message, len(present), *present, *computed_from))
    return tuple(None if g is None else next(passed) for g in grads)
