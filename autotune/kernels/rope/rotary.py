"""rope: transformers' rotary position embedding of queries and keys (`apply_rotary_pos_emb`, the rotate_half
convention), q' = q * cos + rotate_half(q) * sin and k' likewise, in one launch for both."""

from __future__ import annotations

import torch

from autotune import runtime
from autotune.kernels.common import checks as _checks
from autotune.kernels.common import second_order as _second_order
from autotune.kernels.rope import kernel
from autotune.kernels.rope import problems as problems_
from autotune.kernels.rope import rope_backward as backward_
from autotune.search_spaces.rope import SPACE, bucket
from autotune.spec import Inputs, KernelSpec

DTYPES = (*_checks.FLOAT_DTYPES, torch.float64)
"""What the public function takes: the searched dtypes, and float64 (at the default config) for gradcheck."""


def _launch_spec(inputs: Inputs, config: dict, out):
    return kernel.launch_into(inputs["q"], inputs["k"], inputs["cos"], inputs["sin"], out, config, backward=False)


SPEC = KernelSpec(
    name="rope",
    space=SPACE,
    launch=_launch_spec,
    reference=lambda inputs: problems_.forward_torch(inputs, torch.float64),
    baseline=lambda inputs: problems_.forward_torch(inputs, None),
    problems=problems_.problems,
    make_inputs=problems_.forward_inputs,
    bucket=bucket,
    cost=problems_.cost,
    presets=problems_.PRESETS,
    interpreter_presets=problems_.INTERPRETER_PRESETS,
    parse_shape=problems_.parse_shape,
    sources=kernel.SOURCES,
    description="rotary position embedding of q and k (transformers' apply_rotary_pos_emb, rotate_half convention)",
    bucket_edges=problems_.bucket_edges,
    public=lambda inputs: rope(inputs["q"], inputs["k"], inputs["cos"], inputs["sin"]),
)

_TUNED = runtime.tuned(SPEC)


def forward(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """(q', k') with the tuned config, laid out as q and k are where they are dense (the transposed view of a
    projection's output stays one), else packed. Arguments already checked."""
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    if q.numel() or k.numel():
        config = backward_.config_for(_TUNED, SPEC.name, q, k)
        kernel.launch(q, k, cos, sin, q_out, k_out, config, backward=False, table=_TUNED)
    return q_out, k_out


def _recorded_gradients(dq_out, dk_out, cos, sin):
    """The backward in torch ops, for a backward that is itself differentiated (create_graph=True): the same
    rotation, so higher derivatives are autograd's own."""
    def transposed(g):
        gs = g * sin.unsqueeze(1)
        half = g.shape[-1] // 2
        return g * cos.unsqueeze(1) + torch.cat((gs[..., half:], -gs[..., :half]), dim=-1)

    return (None if dq_out is None else transposed(dq_out)), (None if dk_out is None else transposed(dk_out))


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, cos, sin):
        ctx.save_for_backward(cos, sin)
        ctx.set_materialize_grads(False)
        ctx.shapes = (q.shape, k.shape)
        return forward(q, k, cos, sin)

    @staticmethod
    def backward(ctx, dq_out, dk_out):
        cos, sin = ctx.saved_tensors
        if dq_out is None and dk_out is None:
            return None, None, None, None
        if _second_order.recording():
            dq, dk = _recorded_gradients(dq_out, dk_out, cos, sin)
            return dq, dk, None, None
        # One launch for both: a missing gradient is zeros (what autograd would have materialized).
        q_shape, k_shape = ctx.shapes
        dq_out = torch.zeros(q_shape, dtype=cos.dtype, device=cos.device) if dq_out is None else dq_out
        dk_out = torch.zeros(k_shape, dtype=cos.dtype, device=cos.device) if dk_out is None else dk_out
        dq, dk = backward_.backward(dq_out.to(cos.dtype), dk_out, cos, sin)
        return dq, dk, None, None


def _check(q, k, cos, sin) -> None:
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        _checks.float_tensor(name, t, DTYPES)
        _checks.same_device("q", q, name, t)
        _checks.same_dtype("q", q, name, t)
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q and k must be 4-D (batch, heads, positions, head_dim), got q of shape {tuple(q.shape)} "
                         f"and k of shape {tuple(k.shape)}")
    b, _, n, d = q.shape
    if k.shape[0] != b or k.shape[2:] != q.shape[2:]:
        raise ValueError(f"k must have q's batch, positions and head dim: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if d % 2:
        raise ValueError(f"the head dim must be even (rotate_half splits it in two), got q of shape {tuple(q.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dim() != 3 or t.shape[0] not in (1, b) or t.shape[1:] != (n, d):
            raise ValueError(f"{name} must have shape (1 or {b}, {n}, {d}) (batch, positions, head_dim), "
                             f"got {tuple(t.shape)}")
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        raise ValueError("rope does not differentiate cos and sin: pass them detached, or use transformers' "
                         "apply_rotary_pos_emb for gradients with respect to the angles")


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' apply_rotary_pos_emb(q, k, cos, sin) (unsqueeze_dim=1) with the tuned config: q (B, H, N, D),
    k (B, Hk, N, D), cos and sin (B or 1, N, D), one dtype; D even. Any strides (a transposed view is read in
    place). Differentiable in q and k through the tuned rope_backward kernel; a backward recorded for higher
    derivatives (create_graph=True) runs the same rotation in torch ops. Under torch.compile it is the torch
    formula, which compile fuses itself."""
    _check(q, k, cos, sin)
    if torch.compiler.is_compiling():
        return problems_.eager(q, k, cos, sin)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
        return _Rope.apply(q, k, cos, sin)
    return forward(q, k, cos, sin)
