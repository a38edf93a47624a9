"""What a routed call launches: each kind of call as the kernels it runs and the problems their stored rows are
keyed by (a kernel's bucket is computed from its problem). Forward kernels always; with autograd recording, the
backward's kernels too, since both passes leave torch together."""

from __future__ import annotations

from collections.abc import Callable

Use = tuple[str, dict]
"""(kernel name, problem) of one launch."""


def _norm(kernel: str, m: int, n: int, grad: bool) -> list[Use]:
    problem = {"shape": [m, n], "residual": False}
    return [(kernel, problem)] + ([(kernel + "_backward", problem)] if grad else [])


def layer_norm(m: int, n: int, grad: bool) -> list[Use]:
    """layer_norm over rows of n (m rows)."""
    return _norm("layer_norm", m, n, grad)


def rms_norm(m: int, n: int, grad: bool) -> list[Use]:
    """rms_norm over rows of n (m rows)."""
    return _norm("rms_norm", m, n, grad)


def group_norm(
    batch: int, channels: int, positions: int, groups: int, channels_last: bool, activation: str, grad: bool
) -> list[Use]:
    """group_norm (with its fused activation) of an (N, C, *) input; the bucket leaves the activation out."""
    problem = {
        "shape": [batch, channels, positions],
        "groups": groups,
        "layout": "channels_last" if channels_last else "contiguous",
        "activation": activation,
    }
    return [("group_norm", problem)] + ([("group_norm_backward", problem)] if grad else [])


def _mm(m: int, k: int, n: int) -> Use:
    return ("matmul", {"m": m, "k": k, "n": n, "batch": 0})


def linear(m: int, k: int, n: int, grad_x: bool, grad_w: bool) -> list[Use]:
    """linear of x (m, k) and weight (n, k); its backward is dx = dz @ W and dW = dz^T @ x, each through the tuned
    matmul, as torch's backward runs the same two products (bias and activation gradients are torch's own ops in
    both)."""
    uses = [("linear", {"m": m, "k": k, "n": n, "batch": 0})]
    if grad_x:
        uses.append(_mm(m, n, k))
    if grad_w:
        uses.append(_mm(n, m, k))
    return uses


def mlp(m: int, k: int, h: int, n: int) -> list[Use]:
    """mlp without autograd. Its backward recomputes the hidden layer, work torch's backward does not do, so no
    pair of rows can show a recorded call as fast as torch's: a recorded call runs two routed linear calls."""
    return [("mlp", {"m": m, "k": k, "h": h, "n": n})]


def gated_mlp(
    m: int,
    k: int,
    h: int,
    n: int,
    grad_x: bool = False,
    grad_gate: bool = False,
    grad_up: bool = False,
    grad_down: bool = False,
    grad_gate_up_bias: bool = False,
) -> list[Use]:
    """gated_mlp of x (m, k) through gate and up projections of h features and a down projection to n; the forward
    row times the whole forward, the down projection included. With autograd (grad_*: which of x, w_gate, w_up,
    w_down and the gate's or up's bias need a gradient), the launches of gated_mlp's backward: dw_down = dy^T @ h,
    then, where anything before the down projection needs one, dh = dy @ w_down, the elementwise step
    (gated_mlp_backward), dx = dg @ w_gate + du @ w_up, and the weights' gradients ([dg | du]^T @ x as one product
    where both are needed). torch's backward runs the same products (two for the weights) and the same step; the
    biases' gradients are column sums in both."""
    uses = [("gated_mlp", {"m": m, "k": k, "h": h, "n": n})]
    if grad_down:
        uses.append(_mm(n, m, h))
    if grad_x or grad_gate or grad_up or grad_gate_up_bias:
        uses += [_mm(m, n, h), ("gated_mlp_backward", {"m": m, "h": h})]
        if grad_x:
            uses += [_mm(m, h, k), _mm(m, h, k)]
        if grad_gate and grad_up:
            uses.append(_mm(2 * h, m, k))
        else:
            uses += [_mm(h, m, k)] * (int(grad_gate) + int(grad_up))
    return uses


def flash_attn(
    batch: int, heads: int, kv_heads: int, nq: int, nk: int, head_dim: int, causal: bool, grad: bool
) -> list[Use]:
    """flash_attn on (B, H, Nq, D) queries and (B, Hk, Nk, D) keys and values."""
    problem = {
        "batch": batch,
        "heads": heads,
        "kv_heads": kv_heads,
        "nq": nq,
        "nk": nk,
        "head_dim": head_dim,
        "causal": causal,
        "scale": None,
        "magnitude": 1.0,
        "layout": "contiguous",
    }
    return [("flash_attn", problem)] + ([("flash_attn_backward", problem)] if grad else [])


def rope(batch: int, heads: int, kv_heads: int, seq: int, head_dim: int, grad: bool) -> list[Use]:
    """rope of (B, H, N, D) queries and (B, Hk, N, D) keys, one launch for both (and one for their backward)."""
    problem = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq": seq, "head_dim": head_dim}
    return [("rope", problem)] + ([("rope_backward", problem)] if grad else [])


KINDS: dict[str, Callable[..., list[Use]]] = {
    "layer_norm": layer_norm,
    "rms_norm": rms_norm,
    "group_norm": group_norm,
    "linear": linear,
    "mlp": mlp,
    "gated_mlp": gated_mlp,
    "flash_attn": flash_attn,
    "rope": rope,
}
"""Each kind of routed call by name: its arguments (sizes and flags) give its launches."""
