"""The norms in PyTorch: the same-dtype baselines and float64 references the gate compares with, layer_norm's error
floor where its bias cancels, and torch's gradients for a backward that is itself differentiated."""

from __future__ import annotations

import torch

from autotune.kernels.common.second_order import torch_gradients
from autotune.kernels.norm.group_norm_common import apply_activation
from autotune.kernels.norm.rows import mixed_params
from autotune.spec import Inputs


def torch_norm(inputs: Inputs, rms: bool, dtype: torch.dtype | None):
    """torch.nn.functional's norm of inputs, in dtype (None: the inputs' own), residual added first."""
    def cast(t):
        return t if t is None or dtype is None else t.to(dtype)

    x = cast(inputs["x"])
    h = x if inputs["residual"] is None else x + cast(inputs["residual"])
    shape = list(inputs["normalized_shape"])
    if rms:
        y = torch.nn.functional.rms_norm(h, shape, cast(inputs["weight"]), inputs["eps"])
    else:
        weight, bias = cast(inputs["weight"]), cast(inputs["bias"])
        if mixed_params(h, weight, bias):
            # float32 parameters on a half x: what torch's mixed-dtype kernel computes (in float32, one
            # rounding), also where CUDA's refuses the mix (one parameter absent).
            y = torch.nn.functional.layer_norm(h.float(), shape, weight, bias, inputs["eps"]).to(h.dtype)
        else:
            y = torch.nn.functional.layer_norm(h, shape, weight, bias, inputs["eps"])
    return y if inputs["residual"] is None else (y, h)


def forward_floor(inputs: Inputs):
    """Error floor of layer_norm's y (see verify's error_floor), None without a bias: y is the sum of the
    normalized value z (times the weight) and the bias, and where the two cancel the leftover is far smaller
    than they are, while z's own rounding errs in proportion to z. The floor is the root of their summed
    squares, sqrt(z^2 + b^2). The returned sum h gets none: everyone rounds x + residual the same way."""
    if inputs["bias"] is None:
        return None
    z = torch_norm({**inputs, "bias": None}, False, torch.float64)
    z = z if inputs["residual"] is None else z[0]
    floor = (z.square() + inputs["bias"].double().square()).sqrt()
    return floor if inputs["residual"] is None else (floor, None)


def norm_gradients(dy, x, weight, bias, eps: float, rms: bool):
    """(dx, dweight, dbias) of torch's norm in float32 at x (rows, N), recorded: a backward that is itself
    differentiated (create_graph=True) gets torch's exact second order instead of the Triton backward's none."""
    def norm(x, weight, bias):
        x, weight = x.float(), None if weight is None else weight.float()
        if rms:
            return torch.nn.functional.rms_norm(x, x.shape[-1:], weight, eps)
        return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, None if bias is None else bias.float(), eps)

    return torch_gradients(norm, dy, (x, weight, bias))


def group_norm_gradients(dy, x, weight, bias, groups: int, eps: float, activation: str):
    """(dx, dweight, dbias) of torch's group_norm and activation in float32, recorded: a backward that is itself
    differentiated (create_graph=True) gets torch's exact second order instead of the Triton backward's none."""
    def forward(x, weight, bias):
        def f32(t):
            return None if t is None else t.float()

        y = torch.nn.functional.group_norm(x.float(), groups, f32(weight), f32(bias), eps)
        return apply_activation(y, activation)

    return torch_gradients(forward, dy, (x, weight, bias))
