"""rope's backward: dq = dq' * cos + rotate_half^T(dq' * sin), and dk likewise, where rotate_half^T (x1, x2) =
(x2, -x1): the forward's rotation with sin negated and transposed, in one launch for q and k. What
`autotune.kernels.rope`'s autograd launches, with the config tuned for the call's bucket."""

from __future__ import annotations

import torch

from autotune import runtime
from autotune.kernels.rope import kernel
from autotune.kernels.rope import problems as problems_
from autotune.search_spaces.rope import SPACE, bucket
from autotune.spec import Inputs, KernelSpec


def _launch_spec(inputs: Inputs, config: dict, out):
    return kernel.launch_into(inputs["dq"], inputs["dk"], inputs["cos"], inputs["sin"], out, config, backward=True)


def _public(inputs: Inputs):
    return backward(inputs["dq"], inputs["dk"], inputs["cos"], inputs["sin"])


SPEC = KernelSpec(
    name="rope_backward",
    space=SPACE,
    launch=_launch_spec,
    reference=lambda inputs: problems_.backward_torch(inputs, torch.float64),
    baseline=lambda inputs: problems_.backward_torch(inputs, None),
    problems=problems_.problems,
    make_inputs=problems_.backward_inputs,
    bucket=bucket,
    cost=problems_.cost,
    presets=problems_.PRESETS,
    interpreter_presets=problems_.INTERPRETER_PRESETS,
    parse_shape=problems_.parse_shape,
    sources=kernel.SOURCES,
    description="rope backward: dq, dk from the rotated outputs' gradients (the transposed rotation)",
    bucket_edges=problems_.bucket_edges,
    public=_public,
)

_TUNED = runtime.tuned(SPEC)


def config_for(table, name: str, q: torch.Tensor, k: torch.Tensor) -> dict:
    """The config `table` holds for a call on q (B, H, N, D) and k (B, Hk, N, D), noted as launched under name;
    float64 (no rows: it is not a searched dtype) takes the default."""
    if q.dtype == torch.float64:
        config = dict(SPACE.default)
    else:
        b, h, n, d = q.shape
        hk = k.shape[1]
        config = table.lookup(q.dtype, (b, h, hk, n, d), lambda: bucket(problems_.problem(b, h, n, d, kv_heads=hk)),
                              lambda: problems_.problem(b, h, n, d, kv_heads=hk))
    runtime.note_launch(name, config)
    return config


def backward(dq_out: torch.Tensor, dk_out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """(dq, dk) from the gradients of rope's outputs with the tuned config, laid out as the gradients are where
    they are dense (a transposed view stays one), else packed."""
    if dk_out.dtype != dq_out.dtype:
        dk_out = dk_out.to(dq_out.dtype)
    dq, dk = torch.empty_like(dq_out), torch.empty_like(dk_out)
    if dq.numel() or dk.numel():
        config = config_for(_TUNED, SPEC.name, dq_out, dk_out)
        kernel.launch(dq_out, dk_out, cos, sin, dq, dk, config, backward=True, table=_TUNED)
    return dq, dk
