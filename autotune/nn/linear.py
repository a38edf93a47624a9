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
from autotune.nn.routing import check_policy, route, routed

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
    if route(("linear", policy), _decide_linear, x, weight, bias) is True:
        return kernels.linear(x, weight, bias, activation)
    y = F.linear(x, weight, bias)
    return y if activation is None else ACTIVATIONS[activation](y)


def _decide_linear(settings: tuple, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool | str:
    why = _reason(x, weight, bias)
    if why is not None:
        return why
    k = x.shape[-1]
    grad = torch.is_grad_enabled()
    return routed(
        settings[1],
        "linear",
        x.dtype,
        x.numel() // k,
        k,
        weight.shape[0],
        grad and x.requires_grad,
        grad and weight.requires_grad,
    )


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
        weight, bias = support.parameter(self, "weight"), support.parameter(self, "bias")
        return linear(input, weight, bias, self.activation, self.policy)

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
        w1, b1 = support.parameter(fc1, "weight"), support.parameter(fc1, "bias")
        w2, b2 = support.parameter(fc2, "weight"), support.parameter(fc2, "bias")
        way = route(("mlp", self.policy), self._decide, input, w1, b1, w2, b2)
        if way is True:
            return kernels.mlp(input, w1, b1, w2, b2, self.activation)
        if way is not False:
            return super().forward(input)
        hidden = linear(input, w1, b1, self.activation, self.policy)
        return linear(hidden, w2, b2, None, self.policy)

    def _decide(self, settings: tuple, x: torch.Tensor, w1, b1, w2, b2) -> bool | str:
        """True: the mlp kernel; False: two routed linear calls; a string: torch's Sequential (why)."""
        why = _reason(x, w1, b1)
        if why is None and w2.shape[1] != w1.shape[0]:
            why = "the second Linear's in_features are not the first's out_features"
        for p in (w2, b2):
            why = why or support.param(p, x, float32_ok=False)
        if why is not None:
            return why
        if self.policy == "always":
            return True
        if support.grad_needed(x, w1, b1, w2, b2):
            return False
        k = x.shape[-1]
        return routed(self.policy, "mlp", x.dtype, x.numel() // k, k, w1.shape[0], w2.shape[0])


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
        parameters = [support.parameter(m, name) for m in self._projections() for name in ("weight", "bias")]
        w_gate, b_gate, w_up, b_up, w_down, b_down = parameters
        if route(("gated_mlp", self.policy), self._decide, x, *parameters) is True:
            return kernels.gated_mlp(x, w_gate, w_up, w_down, self.activation, b_gate=b_gate, b_up=b_up, b_down=b_down)
        hidden = linear(x, w_gate, b_gate, self.activation, self.policy)
        hidden = hidden * linear(x, w_up, b_up, None, self.policy)
        return linear(hidden, w_down, b_down, None, self.policy)

    def _projections(self) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module]:
        modules = self._modules
        return modules["gate_proj"], modules["up_proj"], modules["down_proj"]

    def _decide(self, settings: tuple, x: torch.Tensor, w_gate, b_gate, w_up, b_up, w_down, b_down) -> bool | str:
        """True: the gated_mlp kernel; False or a string (why the kernel does not take it): three linear calls."""
        why = _reason(x, w_gate, b_gate)
        if why is None and (w_up.shape != w_gate.shape or w_down.shape[1] != w_gate.shape[0]):
            why = "the projections' shapes do not chain"
        for p in (w_up, b_up, w_down, b_down):
            why = why or support.param(p, x, float32_ok=False)
        if why is not None:
            return why
        if self.policy == "always":
            return True
        if support.grad_needed(x, w_gate, b_gate, w_up, b_up, w_down, b_down):
            return False
        k = x.shape[-1]
        return routed(self.policy, "gated_mlp", x.dtype, x.numel() // k, k, w_gate.shape[0], w_down.shape[0])
