"""Linear (optionally with its activation fused), MLP (Linear -> activation -> Linear) and GatedMLP (Llama's
SwiGLU/GeGLU block, through gated_mlp): torch-compatible modules whose forward runs the tuned GEMM kernels.

Each falls back to torch where the kernel does not take the call, and says why in `autotune.nn.fallbacks()`: an
input that is not a float32 or float16 tensor (bfloat16 too on a GPU: the Triton interpreter computes bfloat16
products wrongly) on the device the kernels run on; parameters in another dtype or on another device than the
input; under torch.autocast, which decides the products' dtype; an empty input; an input torch would reject (torch
raises its own error). With policy "measured", a call also stays on torch unless the stored rows show the kernels
at least as fast as torch for its GPU, dtype and bucket (`autotune.nn.routing`)."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from autotune import kernels
from autotune.nn import support
from autotune.nn.routing import check_policy, fell_back, routed

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
}
"""The activations the GEMM epilogue applies, as torch computes them."""


def activation_module(activation: str | None) -> torch.nn.Module:
    """The torch module of an activation name (None: nn.Identity)."""
    modules = {
        None: torch.nn.Identity,
        "relu": torch.nn.ReLU,
        "gelu": torch.nn.GELU,
        "silu": torch.nn.SiLU,
        "gelu_tanh": functools.partial(torch.nn.GELU, approximate="tanh"),
    }
    return modules[activation]()


def _reason(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> str | None:
    why = support.tensor(x, support.GEMM_DTYPES) or support.empty(x)
    if why is None and (x.dim() < 1 or weight.dim() != 2 or x.shape[-1] != weight.shape[1]):
        why = "the input's last dim is not the weight's in_features"
    return why or support.param(weight, x, float32_ok=False) or support.param(bias, x, float32_ok=False)


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str | None, policy: str
) -> torch.Tensor:
    """activation(F.linear(x, weight, bias)) through the tuned `linear` where the policy routes it, else torch."""
    why = _reason(x, weight, bias)
    if why is None:
        k = x.shape[-1]
        grad = torch.is_grad_enabled()
        if routed(
            policy,
            "linear",
            x.dtype,
            x.numel() // k,
            k,
            weight.shape[0],
            grad and x.requires_grad,
            grad and weight.requires_grad,
        ):
            return kernels.linear(x, weight, bias, activation)
    else:
        fell_back("linear", why)
    y = F.linear(x, weight, bias)
    return y if activation is None else ACTIVATIONS[activation](y)


class Linear(torch.nn.Linear):
    """torch.nn.Linear, optionally followed by an activation fused into the GEMM's epilogue (`activation` None,
    "relu", "gelu", "gelu_tanh" or "silu"); same parameters and state_dict. Forward and backward (dx and dW through
    the tuned matmul) run the tuned kernels.

    Args:
        policy: "always" (every call the kernel takes) or "measured" (only where the stored rows show the kernels
            at least as fast as torch): see `autotune.nn.routing`.
    """

    policy: str = "always"
    activation: str | None = None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        activation: str | None = None,
        policy: str = "always",
    ) -> None:
        super().__init__(in_features, out_features, bias, device, dtype)
        self.activation = support.check_activation(activation, ACTIVATIONS)
        self.policy = check_policy(policy)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return linear(input, self.weight, self.bias, self.activation, self.policy)

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.activation is None else f", activation={self.activation!r}")


class MLP(torch.nn.Sequential):
    """Linear -> activation -> Linear through the tuned `mlp` kernel, which never writes the pre-activation (and,
    for narrow outputs, keeps the hidden layer on chip). A torch.nn.Sequential of (Linear, activation, Linear), so
    its state_dict keys ("0.weight", "0.bias", "2.weight", "2.bias") load into and from such a Sequential.

    Under the "measured" policy a call autograd records runs as two routed `linear` calls (the first with the
    activation fused): mlp's backward recomputes the hidden layer, work torch's does not do, so no stored row can
    show it as fast as torch; a call without autograd runs `mlp` where its row shows it at least as fast.
    """

    policy: str = "always"

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        out_features: int | None = None,
        bias: bool = True,
        activation: str | None = "gelu_tanh",
        device=None,
        dtype=None,
        *,
        policy: str = "always",
    ) -> None:
        out_features = in_features if out_features is None else out_features
        super().__init__(
            torch.nn.Linear(in_features, hidden_features, bias, device, dtype),
            activation_module(support.check_activation(activation, ACTIVATIONS)),
            torch.nn.Linear(hidden_features, out_features, bias, device, dtype),
        )
        self.activation = activation
        self.policy = check_policy(policy)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        fc1, fc2 = self[0], self[2]
        why = _reason(input, fc1.weight, fc1.bias)
        if why is None and fc2.weight.shape[1] != fc1.weight.shape[0]:
            why = "the second Linear's in_features are not the first's out_features"
        for p in (fc2.weight, fc2.bias):
            why = why or support.param(p, input, float32_ok=False)
        if why is not None:
            fell_back("mlp", why)
            return super().forward(input)
        k = input.shape[-1]
        grad = support.grad_needed(input, fc1.weight, fc1.bias, fc2.weight, fc2.bias)
        if (
            self.policy == "always"
            or not grad
            and routed(self.policy, "mlp", input.dtype, input.numel() // k, k, fc1.weight.shape[0], fc2.weight.shape[0])
        ):
            return kernels.mlp(input, fc1.weight, fc1.bias, fc2.weight, fc2.bias, self.activation)
        hidden = linear(input, fc1.weight, fc1.bias, self.activation, self.policy)
        return linear(hidden, fc2.weight, fc2.bias, None, self.policy)


class GatedMLP(torch.nn.Module):
    """down(activation(gate(x)) * up(x)): the gated MLP of Llama, Mistral and Qwen (SwiGLU with "silu", GeGLU with
    "gelu" or "gelu_tanh"), with transformers' LlamaMLP state_dict keys (gate_proj, up_proj, down_proj).

    It runs the tuned `gated_mlp`: the gate and up projections as one GEMM with act(g) * u in its epilogue, then the
    down projection. Under the "measured" policy a call autograd records runs as three routed `linear` calls (the
    gate's with its activation fused) and the product in torch: gated_mlp's backward has no stored rows of its own
    to show it as fast as torch's; a call without autograd runs `gated_mlp` where its row shows it at least as fast.
    """

    policy: str = "always"

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        bias: bool = False,
        activation: str = "silu",
        device=None,
        dtype=None,
        *,
        policy: str = "always",
    ) -> None:
        super().__init__()
        if activation is None:
            raise ValueError("activation must be one of the gate's activations, got None")
        self.activation = support.check_activation(activation, ACTIVATIONS)
        self.gate_proj = torch.nn.Linear(hidden_size, intermediate_size, bias, device, dtype)
        self.up_proj = torch.nn.Linear(hidden_size, intermediate_size, bias, device, dtype)
        self.down_proj = torch.nn.Linear(intermediate_size, hidden_size, bias, device, dtype)
        self.policy = check_policy(policy)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up, down = self.gate_proj, self.up_proj, self.down_proj
        why = _reason(x, gate.weight, gate.bias)
        if why is None and (up.weight.shape != gate.weight.shape or down.weight.shape[1] != gate.weight.shape[0]):
            why = "the projections' shapes do not chain"
        for p in (up.weight, up.bias, down.weight, down.bias):
            why = why or support.param(p, x, float32_ok=False)
        if why is None:
            k, h = x.shape[-1], gate.weight.shape[0]
            grad = support.grad_needed(x, gate.weight, gate.bias, up.weight, up.bias, down.weight, down.bias)
            if (
                self.policy == "always"
                or not grad
                and routed(self.policy, "gated_mlp", x.dtype, x.numel() // k, k, h, down.weight.shape[0])
            ):
                return kernels.gated_mlp(
                    x,
                    gate.weight,
                    up.weight,
                    down.weight,
                    self.activation,
                    b_gate=gate.bias,
                    b_up=up.bias,
                    b_down=down.bias,
                )
        else:
            fell_back("gated_mlp", why)
        hidden = linear(x, gate.weight, gate.bias, self.activation, self.policy)
        hidden = hidden * linear(x, up.weight, up.bias, None, self.policy)
        return linear(hidden, down.weight, down.bias, None, self.policy)
