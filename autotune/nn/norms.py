"""LayerNorm, RMSNorm and GroupNorm: torch's modules (same arguments, parameters and state_dict keys, and
subclasses of them) whose forward runs the tuned kernels.

Each falls back to torch's own forward where the kernel does not take the call, and says why in
`autotune.nn.fallbacks()`: an input that is not a float32, float16 or bfloat16 tensor on the device the kernels run
on (CUDA; the CPU under the Triton interpreter); parameters in another dtype than the input (LayerNorm and RMSNorm
also take float32 ones); under torch.autocast, which runs these ops in float32 by its own rules; an empty input;
an input torch would reject (torch raises its own error). With policy "measured", a call also stays on torch unless
the stored rows show the kernels at least as fast as torch for its GPU, dtype and bucket (`autotune.nn.routing`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autotune import kernels
from autotune.nn import support
from autotune.nn.routing import check_policy, route, routed

_MAX_SPAN = 1 << 31  # group_norm addresses a sample in 32-bit offsets
_ACTIVATIONS = {"silu": F.silu, "mish": F.mish}


def _norm_reason(x: torch.Tensor, normalized_shape: tuple[int, ...], weight, bias) -> str | None:
    why = support.tensor(x) or support.empty(x)
    if why is None and tuple(x.shape[x.dim() - len(normalized_shape) :]) != tuple(normalized_shape):
        why = "normalized_shape is not the input's trailing dims"
    return why or support.param(weight, x, float32_ok=True) or support.param(bias, x, float32_ok=True)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm whose forward runs the tuned layer_norm kernels (forward and backward).

    Args:
        policy: "always" (every call the kernel takes) or "measured" (only where the stored rows show the kernels
            at least as fast as torch): see `autotune.nn.routing`.
    """

    policy: str = "always"

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        policy: str = "always",
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)
        self.policy = check_policy(policy)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight, bias = support.parameter(self, "weight"), support.parameter(self, "bias")
        if route(("layer_norm", self.policy, self.normalized_shape), self._decide, input, weight, bias) is True:
            return kernels.layer_norm(input, self.normalized_shape, weight, bias, self.eps)
        return F.layer_norm(input, self.normalized_shape, weight, bias, self.eps)  # torch's LayerNorm.forward

    def _decide(self, settings: tuple, x: torch.Tensor, weight, bias) -> bool | str:
        why = _norm_reason(x, self.normalized_shape, weight, bias)
        if why is not None:
            return why
        n = math.prod(self.normalized_shape)
        return routed(self.policy, "layer_norm", x.dtype, x.numel() // n, n, support.grad_needed(x, weight, bias))


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm whose forward runs the tuned rms_norm kernels (forward and backward); `policy` as in
    LayerNorm."""

    policy: str = "always"

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
        *,
        policy: str = "always",
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, device, dtype)
        self.policy = check_policy(policy)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = support.parameter(self, "weight")
        if route(("rms_norm", self.policy, self.normalized_shape), self._decide, x, weight) is True:
            return kernels.rms_norm(x, self.normalized_shape, weight, self.eps)
        return F.rms_norm(x, self.normalized_shape, weight, self.eps)  # torch's RMSNorm.forward

    def _decide(self, settings: tuple, x: torch.Tensor, weight) -> bool | str:
        why = _norm_reason(x, self.normalized_shape, weight, None)
        if why is not None:
            return why
        n = math.prod(self.normalized_shape)
        return routed(self.policy, "rms_norm", x.dtype, x.numel() // n, n, support.grad_needed(x, weight))


class GroupNorm(torch.nn.GroupNorm):
    """torch.nn.GroupNorm, optionally followed by an activation fused into it (`activation="silu"` or `"mish"`:
    the diffusion U-Net's GroupNorm + SiLU), whose forward runs the tuned group_norm kernels (forward and backward);
    `policy` as in LayerNorm. The activation has no parameters, so the state_dict is torch.nn.GroupNorm's.
    Also falls back where a sample of the input spans 2**31 elements or more."""

    policy: str = "always"
    activation: str | None = None

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device=None,
        dtype=None,
        *,
        activation: str | None = None,
        policy: str = "always",
        **kwargs,
    ) -> None:
        super().__init__(num_groups, num_channels, eps, affine, device, dtype, **kwargs)  # torch's `bias=`, if any
        self.activation = support.check_activation(activation, _ACTIVATIONS)
        self.policy = check_policy(policy)

    def _reason(self, x: torch.Tensor, weight, bias) -> str | None:
        why = support.tensor(x) or support.empty(x)
        if why is None and (x.dim() < 2 or x.shape[1] != self.num_channels):
            why = "not an (N, C, *) input of num_channels channels"
        if why is None and sum((size - 1) * stride for size, stride in zip(x.shape[1:], x.stride()[1:])) >= _MAX_SPAN:
            why = "a sample spans 2**31 elements or more"
        return why or support.param(weight, x, float32_ok=False) or support.param(bias, x, float32_ok=False)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight, bias, activation = support.parameter(self, "weight"), support.parameter(self, "bias"), self.activation
        settings = ("group_norm", self.policy, self.num_groups, self.num_channels, activation)
        if route(settings, self._decide, input, weight, bias) is True:
            return kernels.group_norm(input, self.num_groups, weight, bias, self.eps, activation)
        y = F.group_norm(input, self.num_groups, weight, bias, self.eps)  # torch's GroupNorm.forward
        return y if activation is None else _ACTIVATIONS[activation](y)

    def _decide(self, settings: tuple, x: torch.Tensor, weight, bias) -> bool | str:
        why = self._reason(x, weight, bias)
        if why is not None:
            return why
        return routed(
            self.policy,
            "group_norm",
            x.dtype,
            x.shape[0],
            x.shape[1],
            x.numel() // (x.shape[0] * x.shape[1]),
            self.num_groups,
            x.dim() > 2 and x.stride(1) < x.stride(-1),  # channels last
            self.activation or "none",
            support.grad_needed(x, weight, bias),
        )

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.activation is None else f", activation={self.activation!r}")
