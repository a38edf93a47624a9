"""gated_mlp(x, w_gate, w_up, w_down, activation): down(act(gate(x)) * up(x)), the MLP of Llama, Mistral and Qwen
(SwiGLU with silu; GeGLU with gelu or gelu_tanh). The gate and up projections run as one tuned GEMM with
act(g) * u in its epilogue (gated.py), so neither projection reaches memory on its own; the down projection is one
tuned linear call, at linear's own configs.

Autograd saves what the forward wrote anyway, h (the down projection's input) and, stored by the same epilogue
while autograd records, the pre-activations [g | u]: recomputing them would cost a GEMM of twice the down
projection's work, and keeping them costs what eager torch keeps. The backward runs dh = dy @ w_down, one
elementwise kernel for dg = dh * u * act'(g) and du = dh * act(g), then dx = dg @ w_gate + du @ w_up and
[dw_gate; dw_up] = [dg | du]^T @ x (one product for both) and dw_down = dy^T @ h through the tuned matmul.
A backward recorded for a second order (create_graph=True) gets torch's exact gradients instead.

On a Hopper GPU a bucket's config may run the Gluon GEMM's gated epilogue (engine="gluon": gluon_engine.py); a call
it cannot run (biases, a view TMA cannot read) launches the best stored Triton config instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autotune import runtime
from autotune.kernels.common import checks as _checks
from autotune.kernels.common import second_order as _second_order
from autotune.kernels.gemm import gated as _gated
from autotune.kernels.gemm import gated_problems as problems_
from autotune.kernels.gemm import gemm as _gemm
from autotune.kernels.gemm import gluon_engine as _gluon
from autotune.kernels.gemm import hopper_gemm as _hopper
from autotune.kernels.gemm.gated_backward import gates_backward
from autotune.kernels.gemm.matmul import (
    apply_activation,
    as_rows,
    check_activation,
    check_dtype,
    check_like,
    gemm_spec,
    linear_rows,
    mm,
    needs_graph,
)
from autotune.search_spaces.gated_mlp import SPACE, bucket, resources
from autotune.search_spaces.gemm_gluon import TRITON
from autotune.spec import DTYPE_NAMES, EarlierSpace, Inputs


def gated_rows(x, w_gate, b_gate, w_up, b_up, activation: str, store_gu: bool,
               config: dict, *, checked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(h, [g | u] or an empty tensor), new contiguous tensors, for a 2-D x with one config (ValueError where a
    Gluon config cannot run the call: `runnable` picks one that can; `checked`: the config came from it)."""
    m, k = x.shape
    n = w_gate.shape[0]
    h = x.new_empty((m, n))
    gu = x.new_empty((m, 2 * n) if store_gu else (0,))
    if not _gluon.is_triton(config):
        if checked:  # a public call: its launch kept bound
            _gluon.launch_gated(x, w_gate, w_up, h, gu if store_gu else None, activation, config, _TUNED)
        else:
            _gluon.run_gated(x, w_gate, w_up, h, gu if store_gu else None, activation, config)
        return h, gu
    launch = _TUNED.derived(
        ("gated", x.dtype, m, n, k, x.stride(), w_gate.stride(), w_up.stride(), h.stride(), b_gate is not None,
         b_up is not None, store_gu, activation, tuple(sorted(config.items()))),
        lambda: _gated.plan(m, k, n, x.stride(), w_gate.stride(), w_up.stride(), h.stride(), x.dtype, config,
                            gate_bias=b_gate is not None, up_bias=b_up is not None, store_gu=store_gu,
                            activation=activation),
    )
    _gated.run(launch, x, w_gate, w_up, h, b_gate=b_gate, b_up=b_up, gu=gu if store_gu else None)
    return h, gu


def _config(dtype: torch.dtype, m: int, k: int, h: int, n: int) -> dict:
    def problem() -> dict:
        return {"m": m, "k": k, "h": h, "n": n, "dtype": DTYPE_NAMES[dtype]}

    return _TUNED.lookup(dtype, (m, k, h, n), lambda: bucket(problem()), problem)


def runnable(config: dict, x, w_gate, b_gate, w_up, b_up, w_down, activation: str) -> dict:
    """config, or where it runs the Gluon engine and that cannot run this call, the best stored Triton config of
    the call's bucket."""
    if _gluon.gated_refuses(x, w_gate, w_up, b_gate, b_up, activation, config) is None:
        return config
    sizes = {"m": x.shape[0], "k": x.shape[1], "h": w_gate.shape[0], "n": w_down.shape[0]}
    return _gluon.triton_config(_TUNED, x.dtype, sizes)


def gated_mlp_rows(x, w_gate, b_gate, w_up, b_up, w_down, b_down, activation: str,
                   save: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tuned gated MLP of a 2-D x: (y, and where `save` h and [g | u] for the backward, else empty tensors)."""
    m, k = x.shape
    h_size, n = w_gate.shape[0], w_down.shape[0]
    config = runnable(_config(x.dtype, m, k, h_size, n), x, w_gate, b_gate, w_up, b_up, w_down, activation)
    if m * h_size:
        runtime.note_launch("gated_mlp", config)
    h, gu = gated_rows(x, w_gate, b_gate, w_up, b_up, activation, save, config, checked=True)
    y = linear_rows(h, w_down, b_down, "none", False)[0]
    return y, h if save else h.new_empty(0), gu


@torch.library.custom_op("autotune::gated_mlp", mutates_args=())
def _gated_mlp_op(x: torch.Tensor, w_gate: torch.Tensor, b_gate: torch.Tensor | None, w_up: torch.Tensor,
                  b_up: torch.Tensor | None, w_down: torch.Tensor, b_down: torch.Tensor | None, activation: str,
                  save: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return gated_mlp_rows(x, w_gate, b_gate, w_up, b_up, w_down, b_down, activation, save)


@_gated_mlp_op.register_fake
def _(x, w_gate, b_gate, w_up, b_up, w_down, b_down, activation, save):
    m, h = x.shape[0], w_gate.shape[0]
    return (x.new_empty((m, w_down.shape[0])), x.new_empty((m, h) if save else (0,)),
            x.new_empty((m, 2 * h) if save else (0,)))


def _setup(ctx, inputs, output) -> None:
    x, w_gate, b_gate, w_up, b_up, w_down, b_down, activation, _ = inputs
    ctx.set_materialize_grads(False)  # h and [g | u] get no gradient, not zeros to read
    ctx.save_for_backward(x, w_gate, b_gate, w_up, b_up, w_down, b_down, output[1], output[2])
    ctx.activation = activation


def _torch_forward(activation: str):
    """torch's gated MLP in float32: what a backward recorded for a second order differentiates."""

    def forward(x, w_gate, b_gate, w_up, b_up, w_down, b_down):
        def f32(t):
            return None if t is None else t.float()

        x = x.float()
        hidden = apply_activation(F.linear(x, f32(w_gate), f32(b_gate)), activation) * F.linear(x, f32(w_up), f32(b_up))
        return F.linear(hidden, f32(w_down), f32(b_down))

    return forward


@torch.library.custom_op("autotune::gated_mlp_gates_backward", mutates_args=())
def _gates_backward_op(dh: torch.Tensor, gu: torch.Tensor, activation: str) -> torch.Tensor:
    return gates_backward(dh, gu, activation)


@_gates_backward_op.register_fake
def _(dh, gu, activation):
    return dh.new_empty((dh.shape[0], 2 * dh.shape[1]))


def _gates_backward(dh: torch.Tensor, gu: torch.Tensor, activation: str) -> torch.Tensor:
    """[dg | du] from dh and [g | u]: launched directly, or through its op where torch.compile traces the backward
    or fake tensors come in."""
    if _checks.eager(dh, gu):
        return gates_backward(dh, gu, activation)
    return _gates_backward_op(dh, gu, activation)


def _gradients(ctx, dy) -> tuple[torch.Tensor | None, ...]:
    """The gradients of x and the six parameters from dy (rows, n), None where not needed."""
    x, w_gate, b_gate, w_up, b_up, w_down, b_down, h, gu = ctx.saved_tensors
    params = (w_gate, b_gate, w_up, b_up, w_down, b_down)
    if dy is None:
        return (None,) * 7
    if _second_order.recording():
        return _second_order.torch_gradients(_torch_forward(ctx.activation), dy, (x, *params))
    need = ctx.needs_input_grad[:7]
    if h.dim() == 1:  # not saved: the op was called without `save`
        config = runnable(_config(x.dtype, *x.shape, *w_down.shape[::-1]), x, w_gate, b_gate, w_up, b_up, w_down,
                          ctx.activation)
        h, gu = gated_rows(x, w_gate, b_gate, w_up, b_up, ctx.activation, True, config, checked=True)
    grads: list[torch.Tensor | None] = [None] * 7
    grads[5] = mm(dy.t(), h) if need[5] else None
    grads[6] = dy.sum(0) if b_down is not None and need[6] else None
    if any(need[:5]):
        n = w_gate.shape[0]
        dgu = _gates_backward(mm(dy, w_down), gu, ctx.activation)
        dg, du = dgu[:, :n], dgu[:, n:]
        grads[0] = mm(dg, w_gate).add_(mm(du, w_up)) if need[0] else None
        if need[1] and need[3]:
            dw = mm(dgu.t(), x)  # both weights' gradients in one product
            grads[1], grads[3] = dw[:n], dw[n:]
        else:
            grads[1] = mm(dg.t(), x) if need[1] else None
            grads[3] = mm(du.t(), x) if need[3] else None
        grads[2] = dg.sum(0) if b_gate is not None and need[2] else None
        grads[4] = du.sum(0) if b_up is not None and need[4] else None
    return tuple(grads)


def _op_backward(ctx, dy, _dh, _dgu):
    return (*_gradients(ctx, dy), None, None)


_gated_mlp_op.register_autograd(_op_backward, setup_context=_setup)


class _EagerGatedMlp(torch.autograd.Function):
    """_gated_mlp_op's forward and backward for an eager call that records a graph, without the op's dispatch and
    autograd wrapper (as matmul's _EagerLinear)."""

    @staticmethod
    def forward(ctx, x, w_gate, b_gate, w_up, b_up, w_down, b_down, activation: str):
        inputs = (x, w_gate, b_gate, w_up, b_up, w_down, b_down, activation, True)
        outputs = gated_mlp_rows(*inputs)
        _setup(ctx, inputs, outputs)
        return outputs[0]

    @staticmethod
    def backward(ctx, dy):
        return (*_gradients(ctx, dy), None)


def _gated_mlp_call(x, w_gate, b_gate, w_up, b_up, w_down, b_down, activation: str) -> torch.Tensor:
    """The tuned gated MLP of a checked 2-D x: through the custom op where torch.compile traces or a tensor
    subclass comes in, through _EagerGatedMlp where an eager call records a graph, else launched directly."""
    tensors = (x, w_gate, b_gate, w_up, b_up, w_down, b_down)
    if not _checks.eager(*tensors):
        save = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
        return _gated_mlp_op(*tensors, activation, save)[0]  # what torch.compile traces; fake tensors run its fake
    if needs_graph(*tensors):
        return _EagerGatedMlp.apply(*tensors, activation)
    return gated_mlp_rows(*tensors, activation, False)[0]


def gated_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
              activation: str | None = "silu", *, b_gate: torch.Tensor | None = None, b_up: torch.Tensor | None = None,
              b_down: torch.Tensor | None = None) -> torch.Tensor:
    """linear(act(linear(x, w_gate, b_gate)) * linear(x, w_up, b_up), w_down, b_down) for x (*, K), w_gate and
    w_up (H, K), w_down (N, H) and the optional biases (H,), (H,), (N,); activation "silu" (SwiGLU), "gelu"
    (exact, with erf), "gelu_tanh" (GeGLU as Gemma computes it), "relu", or None (a bilinear layer). float32
    multiplies in IEEE float32 (no TF32).

    Differentiable in x and every parameter through tuned kernels, to second order (create_graph=True) through
    torch's exact formulas; a torch custom op, so it works under torch.compile(fullgraph=True).
    """
    check_dtype("x", x)
    if x.dim() < 1:
        raise ValueError("x must have at least one dim (its last is K), got a 0-d tensor")
    for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        if not isinstance(w, torch.Tensor) or w.dim() != 2:
            shape = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
            raise ValueError(f"{name} must be a 2-D tensor, got {shape}")
    k, h = x.shape[-1], w_gate.shape[0]
    check_like("w_gate", w_gate, x, (h, k))
    check_like("w_up", w_up, x, (h, k))
    check_like("w_down", w_down, x, (w_down.shape[0], h))
    check_like("b_gate", b_gate, x, (h,))
    check_like("b_up", b_up, x, (h,))
    check_like("b_down", b_down, x, (w_down.shape[0],))
    act = check_activation(activation)
    y = _gated_mlp_call(as_rows(x), w_gate, b_gate, w_up, b_up, w_down, b_down, act)
    return y.view(*x.shape[:-1], w_down.shape[0])


def _spec_launch(inputs: Inputs, config: dict, out: torch.Tensor) -> torch.Tensor:
    x = as_rows(inputs["x"])
    h = gated_rows(x, inputs["w_gate"], inputs["b_gate"], inputs["w_up"], inputs["b_up"], inputs["activation"],
                   False, config)[0]
    # linear allocates its output: the copy costs the search's timing about 1% at the Llama shapes.
    out.view(x.shape[0], out.shape[-1]).copy_(linear_rows(h, inputs["w_down"], inputs["b_down"], "none", False)[0])
    return out


def _torch_gated_mlp(inputs: Inputs, dtype: torch.dtype | None, gated: bool = True) -> torch.Tensor:
    def cast(name: str):
        t = inputs[name]
        return t if t is None or dtype is None else t.to(dtype)

    x = cast("x")
    g = F.linear(x, cast("w_gate"), cast("b_gate"))
    u = F.linear(x, cast("w_up"), cast("b_up"))
    hidden = apply_activation(g, inputs["activation"]) * u if gated else g
    return F.linear(hidden, cast("w_down"), cast("b_down"))


GATED_MLP = gemm_spec(
    name="gated_mlp",
    resources=resources,
    space=SPACE,
    launch=_spec_launch,
    reference=lambda inputs: _torch_gated_mlp(inputs, torch.float64),
    baseline=lambda inputs: _torch_gated_mlp(inputs, None),
    problems=problems_.gated_problems,
    problems_for_config=lambda config, dtype, max_numel: _gluon.aligned_problems(problems_.gated_problems_for_config(
        config, DTYPE_NAMES[dtype], max_numel), config, ("m", "k", "h"), plain=False),
    make_inputs=problems_.gated_inputs,
    bucket=bucket,
    cost=problems_.gated_cost,
    # Llama 3 8B's MLP at 8192 and 4096 tokens, and TinyLlama's (hidden 2048, intermediate 5632).
    presets=[problems_.parse_gated(s) for s in ("8192x4096x14336x4096", "4096x4096x14336x4096", "8192x2048x5632x2048")],
    interpreter_presets=[problems_.parse_gated("33x40x72x24")],
    parse_shape=problems_.parse_gated,
    sources=(*_gemm.SOURCES, *_gated.SOURCES, *_hopper.SOURCES),  # the down projection runs gemm.py's kernel
    # The rows tuned before the Gluon engine: the Triton kernels alone, configs without the engine's parameters.
    extends=(EarlierSpace.before(SPACE, (*_gemm.SOURCES, *_gated.SOURCES), new=TRITON),),
    description="down(act(gate(x)) * up(x)) (SwiGLU, GeGLU), gate and up in one GEMM with act(g) * u fused",
    bucket_edges=problems_.gated_edges,
    public=lambda inputs: gated_mlp(inputs["x"], inputs["w_gate"], inputs["w_up"], inputs["w_down"],
                                    inputs["activation"], b_gate=inputs["b_gate"], b_up=inputs["b_up"],
                                    b_down=inputs["b_down"]),
    vendor=lambda inputs: _torch_gated_mlp(inputs, None, gated=False),
    error_floor=problems_.gated_floor,
)

_TUNED = runtime.tuned(GATED_MLP)
