"""matmul(a, b) and linear(x, weight, bias, activation): the tuned GEMM kernels (autotune/kernels/gemm/gemm.py)
as torch custom ops with autograd, their specs, and the public functions.

linear's bias and activation run in the GEMM's epilogue, on the float32 tile in registers: the output is
rounded once, where torch rounds the product and then the activation. While autograd records, linear's
kernel also stores the pre-activation (a second output written by the same epilogue, cheaper than
recomputing the product); the backward applies the activation's derivative to the incoming gradient
with torch's own formula (aten's *_backward ops), then runs dx = dz @ W, dW = dz^T @ x through the tuned
matmul and sums db = dz over rows.

On a Hopper GPU a bucket's config may run the Gluon GEMM (engine="gluon": gluon_engine.py); a call it cannot run
(a bias, an activation, a batch, a view TMA cannot read) launches the best stored Triton config instead.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from autotune import gpu, runtime
from autotune.kernels.common import checks as _checks
from autotune.kernels.gemm import gemm as _gemm
from autotune.kernels.gemm import gluon_engine as _gluon
from autotune.kernels.gemm import hopper_gemm as _hopper
from autotune.kernels.gemm import problems as problems_
from autotune.search_spaces.gemm_gluon import TRITON
from autotune.search_spaces.matmul import SPACE, bucket, resources
from autotune.spec import DTYPE_NAMES, EarlierSpace, Inputs, KernelSpec

DTYPES = (torch.float32, torch.float16) if gpu.interpreter_active() else (torch.float32, torch.float16, torch.bfloat16)
"""bfloat16 needs a GPU: the Triton interpreter computes bfloat16 tl.dot wrongly."""
ACTIVATIONS = tuple(_gemm.ACTIVATIONS)
_TORCH_ACTIVATIONS = {
    "none": lambda t: t, "relu": F.relu, "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"), "silu": F.silu,
}


def apply_activation(t: torch.Tensor, activation: str) -> torch.Tensor:
    """torch's version of a fused activation."""
    return _TORCH_ACTIVATIONS[activation](t)


def activation_backward(dy: torch.Tensor, z: torch.Tensor, activation: str) -> torch.Tensor:
    """d activation(z) / dz * dy, as torch's autograd computes it from the saved pre-activation z;
    differentiable in dy and z where grad mode is on (a backward recorded with create_graph=True)."""
    if activation == "relu":
        return torch.ops.aten.threshold_backward(dy, z, 0)
    if activation in ("gelu", "gelu_tanh"):
        return torch.ops.aten.gelu_backward(dy, z, approximate="tanh" if activation == "gelu_tanh" else "none")
    if activation == "silu":
        if torch.is_grad_enabled():  # aten's silu_backward has no derivative: its formula in differentiable ops
            s = torch.sigmoid(z)
            return dy * s * (1 + z * (1 - s))
        return torch.ops.aten.silu_backward(dy, z)
    return dy


def _batched(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a, b as (B, M, K) and (B, K, N) views: a 2-D operand, or a batch of one, broadcast (batch stride 0)."""
    batch = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)

    def as3(t: torch.Tensor) -> torch.Tensor:
        return (t if t.dim() == 3 else t.unsqueeze(0)).expand(batch, *t.shape[-2:])

    return as3(a), as3(b)


def _config(table: runtime.TunedConfigs, dtype: torch.dtype, m: int, n: int, k: int, batch: int) -> dict:
    def problem() -> dict:
        return {"m": m, "n": n, "k": k, "batch": batch, "dtype": DTYPE_NAMES[dtype]}

    return table.lookup(dtype, (m, n, k, batch), lambda: bucket(problem()), problem)


def matmul_batched(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The tuned a @ b for a (B, M, K) and b (B, K, N): a new contiguous (B, M, N)."""
    batch, m, k = a.shape
    n = b.shape[2]
    key, rows = (a.dtype, a.shape, a.stride(), b.shape, b.stride()), batch if batch > 1 else 0

    def plan(config: dict) -> _gemm.Launch:
        return _gemm.plan(a.shape, a.stride(), b.shape, b.stride(), (m * n, n, 1), a.dtype, config)

    launch = _gluon.routed(_TUNED_MATMUL, key, lambda: _config(_TUNED_MATMUL, a.dtype, m, n, k, rows), plan)
    y = torch.empty((batch, m, n), dtype=a.dtype, device=a.device)
    if isinstance(launch, dict):  # the bucket's Gluon config
        if batch == 1 and _gluon.matmul_refuses(a[0], b[0], launch) is None:
            runtime.note_launch("matmul", launch)
            _gluon.launch_matmul(a[0], b[0], y[0], launch, _TUNED_MATMUL)
            return y
        launch = _gluon.triton_plan(_TUNED_MATMUL, key, lambda: _gluon.triton_config(_TUNED_MATMUL, a.dtype, {"m": m, "n": n, "k": k, "batch": rows}), plan)
    if not launch.empty:
        runtime.note_launch("matmul", launch.config)
        _gemm.run(launch, a, b, y)
    return y


def _linear_plan(dtype: torch.dtype, m: int, n: int, k: int, x_strides: tuple[int, ...], w_strides: tuple[int, ...],
                 bias: bool, pre: bool, activation: str, config: dict) -> _gemm.Launch:
    """The GEMM launch of linear_rows: x (M, K) as a batch of one, weight (N, K) read as its transpose."""
    return _gemm.plan((1, m, k), (0, *x_strides), (1, k, n), (0, w_strides[1], w_strides[0]), (0, n, 1), dtype,
                      config, bias=bias, pre=pre, activation=activation)


def linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str,
                save_pre: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The tuned activation(x @ weight.T + bias) for a 2-D x: (y, the pre-activation or an empty tensor)."""
    m, k = x.shape
    n = weight.shape[0]
    has_bias = bias is not None
    key = (x.dtype, m, n, k, x.stride(), weight.stride(), has_bias, save_pre, activation)

    def plan(config: dict) -> _gemm.Launch:
        return _linear_plan(x.dtype, m, n, k, x.stride(), weight.stride(), has_bias, save_pre, activation, config)

    launch = _gluon.routed(_TUNED_LINEAR, key, lambda: _config(_TUNED_LINEAR, x.dtype, m, n, k, 0), plan)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    z = torch.empty_like(y) if save_pre else y.new_empty(0)
    if isinstance(launch, dict):  # the bucket's Gluon config
        if _gluon.linear_refuses(x, weight, bias, activation, save_pre, launch) is None:
            runtime.note_launch("linear", launch)
            _gluon.launch_matmul(x, weight.t(), y, launch, _TUNED_LINEAR)
            return y, z
        launch = _gluon.triton_plan(_TUNED_LINEAR, key, lambda: _gluon.triton_config(_TUNED_LINEAR, x.dtype, {"m": m, "n": n, "k": k, "batch": 0}), plan)
    if not launch.empty:
        runtime.note_launch("linear", launch.config)
        _gemm.run(launch, x, weight, y, bias=bias, z=z if save_pre else None)
    return y, z


@torch.library.custom_op("autotune::matmul", mutates_args=())
def _matmul_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return matmul_batched(a, b)


@_matmul_op.register_fake
def _(a, b):
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


def _matmul_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _matmul_backward(ctx, dy):
    a, b = ctx.saved_tensors
    da = _matmul_call(dy, b.transpose(1, 2)) if ctx.needs_input_grad[0] else None
    db = _matmul_call(a.transpose(1, 2), dy) if ctx.needs_input_grad[1] else None
    return da, db


_matmul_op.register_autograd(_matmul_backward, setup_context=_matmul_setup)


class _EagerMatmul(torch.autograd.Function):
    """_matmul_op's forward and backward for an eager call that records a graph, without the op's dispatch and
    autograd wrapper (as _EagerLinear)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return matmul_batched(a, b)

    @staticmethod
    def backward(ctx, dy):
        return _matmul_backward(ctx, dy)


def _matmul_call(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The tuned a @ b of (B, M, K) and (B, K, N): through the custom op where torch.compile traces or a tensor
    subclass comes in, through _EagerMatmul where an eager call records a graph, else launched directly."""
    if not _checks.eager(a, b):
        return _matmul_op(a, b)  # what torch.compile traces; fake tensors run its fake
    if needs_graph(a, b):
        return _EagerMatmul.apply(a, b)
    return matmul_batched(a, b)


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The tuned 2-D a @ b (what the backward passes launch): a plain launch in an eager backward, the op
    where torch.compile traces, recorded where the backward itself records a graph (create_graph=True)."""
    return _matmul_call(a.unsqueeze(0), b.unsqueeze(0))[0]


@torch.library.custom_op("autotune::linear", mutates_args=())
def linear_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str,
               save_pre: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return linear_rows(x, weight, bias, activation, save_pre)


@linear_op.register_fake
def _(x, weight, bias, activation, save_pre):
    y = x.new_empty((x.shape[0], weight.shape[0]))
    return y, x.new_empty(y.shape if save_pre else (0,))


def _linear_setup(ctx, inputs, output) -> None:
    x, weight, bias, activation, _ = inputs
    ctx.set_materialize_grads(False)  # the pre-activation output gets no gradient, not zeros to read
    ctx.save_for_backward(x, weight, bias, output[1])
    ctx.activation = activation


def _linear_backward(ctx, dy, dz):
    """Gradients from dy (of the output) and dz (of the stored pre-activation, where a second-order graph
    reaches it: mlp's backward differentiates through it)."""
    x, weight, bias, z = ctx.saved_tensors
    dz = dz if z.numel() else None  # nothing stored: a gradient of the empty output (compiled, zeros) is none
    if dy is None and dz is None:
        return None, None, None, None, None
    if dy is not None and ctx.activation != "none":
        # Recomputed where it was not stored, or where this backward is recorded (create_graph=True) and z,
        # kept by _EagerLinear as a plain tensor, has no graph back to x and the parameters.
        if z.numel() != dy.numel() or torch.is_grad_enabled() and not z.requires_grad and needs_graph(x, weight, bias):
            z = linear_call(x, weight, bias, "none", False)[0]
        dy = activation_backward(dy, z, ctx.activation)
    dy = dz if dy is None else dy if dz is None else dy + dz
    dx = mm(dy, weight) if ctx.needs_input_grad[0] else None
    dw = mm(dy.t(), x) if ctx.needs_input_grad[1] else None
    db = dy.sum(0) if bias is not None and ctx.needs_input_grad[2] else None
    return dx, dw, db, None, None


linear_op.register_autograd(_linear_backward, setup_context=_linear_setup)


class _EagerLinear(torch.autograd.Function):
    """linear_op's forward and backward function for an eager call that records a graph, without the op's dispatch
    and autograd wrapper: 0.2-0.25 ms less host time per forward + backward on the H100's host
    (docs/kernels.md, on eager calls), before the backward's products skipped it too."""

    @staticmethod
    def forward(ctx, x, weight, bias, activation: str, save_pre: bool):
        y, z = linear_rows(x, weight, bias, activation, save_pre)
        _linear_setup(ctx, (x, weight, bias, activation, save_pre), (y, z))
        return y

    @staticmethod
    def backward(ctx, dy):
        return _linear_backward(ctx, dy, None)


def needs_graph(*tensors: torch.Tensor | None) -> bool:
    """Whether a call must go through the custom op: autograd records, or torch.compile traces."""
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def linear_call(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str,
                save_pre: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """linear_rows where no graph is recorded or traced (as in an eager backward), else linear_op."""
    if needs_graph(x, weight, bias) or not _checks.eager(x, weight, bias):
        return linear_op(x, weight, bias, activation, save_pre)
    return linear_rows(x, weight, bias, activation, save_pre)


def linear_2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    """linear on checked arguments with a 2-D x: through the custom op where torch.compile traces or a tensor
    subclass comes in, through _EagerLinear where an eager call records a graph."""
    if needs_graph(x, weight, bias):
        save_pre = activation != "none" and torch.is_grad_enabled()
        if not _checks.eager(x, weight, bias):
            return linear_op(x, weight, bias, activation, save_pre)[0]  # what torch.compile traces
        return _EagerLinear.apply(x, weight, bias, activation, save_pre)
    return linear_rows(x, weight, bias, activation, False)[0]


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """x (*, K) as (M, K); also for K = 0, where reshape(-1, 0) cannot tell M."""
    k = x.shape[-1]
    return x.reshape(-1, k) if k else x.reshape(x.shape[:-1].numel(), 0)


def check_dtype(name: str, t: object) -> torch.Tensor:
    """t is a float tensor these kernels take, here."""
    if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 and torch.bfloat16 not in DTYPES:
        raise TypeError(f"{name} is bfloat16, which needs a GPU: the Triton interpreter computes bfloat16 tl.dot wrongly")
    return _checks.float_tensor(name, t, DTYPES)


def check_like(name: str, t: torch.Tensor | None, x: torch.Tensor, shape: tuple[int, ...]) -> None:
    """t (if given) is a tensor of shape on x's device, in x's dtype."""
    if t is None:
        return
    check_dtype(name, t)
    _checks.same_device("x", x, name, t)
    _checks.same_dtype("x", x, name, t)
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")


def check_activation(activation: object) -> str:
    if activation is None:
        return "none"
    if not isinstance(activation, str):
        raise TypeError(f"activation must be None or a string, got {type(activation).__name__}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be None or one of {list(ACTIVATIONS)}, got {activation!r}")
    return activation


def _check_matmul(a, b) -> None:
    check_dtype("a", a)
    check_dtype("b", b)
    _checks.same_device("a", a, "b", b)
    _checks.same_dtype("a", a, "b", b)
    if a.dim() not in (2, 3) or b.dim() not in (2, 3):
        raise ValueError(f"matmul takes 2-D or 3-D tensors, got a of shape {tuple(a.shape)}, b of shape {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"a's last dim ({a.shape[-1]}) must equal b's second-to-last ({b.shape[-2]}): "
                         f"a {tuple(a.shape)} @ b {tuple(b.shape)}")
    if a.dim() == b.dim() == 3 and a.shape[0] != b.shape[0] and 1 not in (a.shape[0], b.shape[0]):
        raise ValueError(f"batch sizes {a.shape[0]} and {b.shape[0]} do not broadcast")


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul(a, b) for 2-D and 3-D a, b (a 2-D operand, or a batch of one, broadcasts over the
    other's batch), any strides, with the tuned config. float32 multiplies in IEEE float32 (no TF32).

    Differentiable through the same tuned kernel; a torch custom op, so it works under
    torch.compile(fullgraph=True).
    """
    _check_matmul(a, b)
    a3, b3 = _batched(a, b)
    y = _matmul_call(a3, b3)
    return y[0] if a.dim() == b.dim() == 2 else y


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None) -> torch.Tensor:
    """activation(torch.nn.functional.linear(x, weight, bias)) with the tuned config: weight (N, K), x
    (*, K), bias (N,); activation None, "relu", "gelu", "gelu_tanh" or "silu", applied with the bias in
    the GEMM's epilogue. float32 multiplies in IEEE float32 (no TF32).

    Differentiable in x, weight and bias through the tuned matmul, to second order (create_graph=True) too;
    a torch custom op, so it works under torch.compile(fullgraph=True).
    """
    check_dtype("x", x)
    if x.dim() < 1:
        raise ValueError("x must have at least one dim (its last is K), got a 0-d tensor")
    k = x.shape[-1]
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape[1] != k:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"weight must be a 2-D tensor (N, K) with K = x's last dim ({k}), got {shape}")
    check_like("weight", weight, x, tuple(weight.shape))
    check_like("bias", bias, x, (weight.shape[0],))
    act = check_activation(activation)
    y = linear_2d(as_rows(x), weight, bias, act)
    return y.view(*x.shape[:-1], weight.shape[0])


def _spec_matmul(inputs: Inputs, config: dict, out: torch.Tensor) -> torch.Tensor:
    a3, b3 = _batched(inputs["a"], inputs["b"])
    if not _gluon.is_triton(config):
        if a3.shape[0] != 1:
            raise ValueError(f"matmul: engine=gluon multiplies one pair of matrices, got a batch of {a3.shape[0]}")
        _gluon.run_matmul(a3[0], b3[0], out.view(a3.shape[1], b3.shape[2]), config)
        return out
    _gemm.gemm(a3, b3, out.view(a3.shape[0], a3.shape[1], b3.shape[2]), config)
    return out


def _spec_linear(inputs: Inputs, config: dict, out: torch.Tensor) -> torch.Tensor:
    x = inputs["x"].reshape(-1, inputs["x"].shape[-1])
    if not _gluon.is_triton(config):
        if inputs["bias"] is not None or inputs["activation"] != "none":
            raise ValueError("linear: engine=gluon adds no bias and applies no activation")
        _gluon.run_matmul(x, inputs["weight"].t(), out.view(x.shape[0], -1), config, "linear")
        return out
    _gemm.gemm(x.unsqueeze(0), inputs["weight"].t().unsqueeze(0), out.view(1, x.shape[0], -1), config,
               bias=inputs["bias"], activation=inputs["activation"])
    return out


def _torch_linear(inputs: Inputs, dtype: torch.dtype | None, activation: bool = True) -> torch.Tensor:
    def cast(t):
        return t if t is None or dtype is None else t.to(dtype)

    y = F.linear(cast(inputs["x"]), cast(inputs["weight"]), cast(inputs["bias"]))
    return apply_activation(y, inputs["activation"]) if activation else y


def gemm_spec(**fields) -> KernelSpec:
    """A KernelSpec of the matmul family: compute-bound, the dtypes above, constraints that read the dtype."""
    return KernelSpec(dtypes=DTYPES, bound="compute", dtype_in_problem=True, **{"resources": resources, **fields})


MATMUL = gemm_spec(
    name="matmul",
    space=SPACE,
    launch=_spec_matmul,
    reference=lambda inputs: torch.matmul(inputs["a"].double(), inputs["b"].double()),
    baseline=lambda inputs: torch.matmul(inputs["a"], inputs["b"]),
    problems=problems_.matmul_problems,
    problems_for_config=lambda config, dtype, max_numel: _gluon.aligned_problems(problems_.problems_for_config(
        config, DTYPE_NAMES[dtype], max_numel, problems_.matmul_problems), config, ("m", "k", "n")),
    make_inputs=problems_.matmul_inputs,
    bucket=bucket,
    cost=problems_.matmul_cost,
    presets=[problems_.parse_matmul(s) for s in ("4096x4096x4096", "8192x8192x8192", "8192x4096x4096",
                                                 "8192x4096x14336", "8192x14336x4096", "8192x4096x16384")],
    interpreter_presets=[problems_.parse_matmul("65x40x72")],
    parse_shape=problems_.parse_matmul,
    sources=(*_gemm.SOURCES, *_hopper.SOURCES),
    # The rows tuned before the Gluon engine: the Triton kernels alone, configs without the engine's parameters.
    extends=(EarlierSpace.before(SPACE, _gemm.SOURCES, new=TRITON),),
    description="a @ b (torch.matmul) for 2-D and batched 3-D operands, any strides",
    bucket_edges=problems_.matmul_edges,
    public=lambda inputs: matmul(inputs["a"], inputs["b"]),
    vendor=lambda inputs: torch.matmul(inputs["a"], inputs["b"]),
    error_floor=problems_.matmul_floor,
)

LINEAR = gemm_spec(
    name="linear",
    space=SPACE,
    launch=_spec_linear,
    reference=lambda inputs: _torch_linear(inputs, torch.float64),
    baseline=lambda inputs: _torch_linear(inputs, None),
    problems=problems_.linear_problems,
    problems_for_config=lambda config, dtype, max_numel: _gluon.aligned_problems(problems_.problems_for_config(
        config, DTYPE_NAMES[dtype], max_numel, problems_.linear_problems), config, ("m", "k", "n")),
    make_inputs=problems_.linear_inputs,
    bucket=bucket,
    cost=problems_.linear_cost,
    # The goal shape (also mlp's first product), mlp's second product, and a square one.
    presets=[problems_.parse_linear(s) for s in ("8192x4096x16384,bias,gelu_tanh", "8192x16384x4096,bias", "8192x4096x4096,bias")],
    interpreter_presets=[problems_.parse_linear("33x72x40,bias,gelu_tanh")],
    parse_shape=problems_.parse_linear,
    sources=(*_gemm.SOURCES, *_hopper.SOURCES),
    extends=(EarlierSpace.before(SPACE, _gemm.SOURCES, new=TRITON),),
    description="activation(x @ weight.T + bias) (torch.nn.functional.linear), bias and activation fused",
    bucket_edges=problems_.linear_edges,
    public=lambda inputs: linear(inputs["x"], inputs["weight"], inputs["bias"], inputs["activation"]),
    vendor=lambda inputs: _torch_linear(inputs, None, activation=False),
    error_floor=problems_.linear_floor,
)

_TUNED_MATMUL = runtime.tuned(MATMUL)
_TUNED_LINEAR = runtime.tuned(LINEAR)
