"""mlp(x, w1, b1, w2, b2, activation): Linear -> activation -> Linear, the pre-activation never written to
memory. The search picks, per shape, two tuned linear calls (the first writes the activated hidden layer
from its epilogue) or one fused kernel that keeps the hidden layer in registers, chunk by chunk.

Autograd recomputes the hidden layer (one tuned linear call, storing the pre-activation too) instead of
saving it, then runs the four backward products through the tuned matmul.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from autotune import runtime
from autotune.kernels.common import checks as _checks
from autotune.kernels.common.grid import cdiv
from autotune.kernels.gemm import gemm as _gemm
from autotune.kernels.gemm import problems as problems_
from autotune.kernels.gemm.gemm import accumulate, activate, dot_pointers, partial_sums, store_tile
from autotune.kernels.gemm.matmul import (
    activation_backward,
    apply_activation,
    as_rows,
    check_activation,
    check_dtype,
    check_like,
    gemm_spec,
    linear_call,
    linear_rows,
    mm,
    needs_graph,
)
from autotune.search_spaces.mlp import SPACE, bucket, resources
from autotune.spec import DTYPE_NAMES, Inputs


@triton.jit
def _mlp_fused_kernel(x_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, y_ptr, M, K, H, N,
                      s_xm, s_xk, s_w1h, s_w1k, s_w2n, s_w2h, s_ym, s_yn,
                      ACTIVATION: tl.constexpr, HAS_B1: tl.constexpr, HAS_B2: tl.constexpr, PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
                      EVEN_K: tl.constexpr):
    """One (BLOCK_M, BLOCK_N) tile of activation(x @ w1.T + b1) @ w2.T + b2. The hidden layer goes in
    BLOCK_H chunks: each is computed over all of K, activated and rounded to the working dtype in registers
    (as a pair of linears would store it), and multiplied into the output tile. Programs with the same rows
    are neighbours, so x's rows stay in L2 while they run."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    row = (tl.program_id(0) // tiles_n) * BLOCK_M
    col = (tl.program_id(0) % tiles_n) * BLOCK_N
    hs = tl.arange(0, BLOCK_H)
    cols = col + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w1_chunk = w1_ptr
    w1_step = tl.full((), BLOCK_H, tl.int64) * s_w1h  # 64-bit: h * stride passes 2**31 in large weights
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    part = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for h in range(0, H, BLOCK_H):
        # Columns [h, h + BLOCK_H) of w1.T: the (H, K) w1 read through its transpose's strides.
        z = dot_pointers(x_ptr, w1_chunk, row, 0, M, H - h, K, 0, K, s_xm, s_xk, s_w1k, s_w1h,
                         BLOCK_M, BLOCK_H, BLOCK_K, EVEN_K, PRECISION)
        w1_chunk += w1_step
        h_ok = h + hs < H
        if HAS_B1:
            z += tl.load(b1_ptr + h + hs, mask=h_ok, other=0.0).to(tl.float32)[None, :]
        # Lanes past H hold activation(0) = 0, and meet rows of w2.T loaded as 0.
        hidden = activate(z, ACTIVATION).to(w2_ptr.dtype.element_ty)
        w2_offs = (h + hs).to(tl.int64)[:, None] * s_w2h + cols.to(tl.int64)[None, :] * s_w2n
        w2 = tl.load(w2_ptr + w2_offs, mask=h_ok[:, None] & col_ok[None, :], other=0.0)
        acc, part = accumulate(acc, part, hidden, w2, h // BLOCK_H, BLOCK_H, PRECISION)
    acc = partial_sums(acc, part, PRECISION)
    store_tile(acc, row + tl.arange(0, BLOCK_M), cols, M, N, y_ptr, y_ptr, b2_ptr, s_ym, s_yn, 0, HAS_B2, False)


def launch_fused(x, w1, b1, w2, b2, y, activation: str, config: dict) -> None:
    """y = activation(x @ w1.T + b1) @ w2.T + b2 with the fused kernel, for 2-D x and y (any strides)."""
    m, k = x.shape
    h, n = w1.shape[0], w2.shape[0]
    _mlp_fused_kernel[(cdiv(m, config["BLOCK_M"]) * cdiv(n, config["BLOCK_N"]),)](
        x, w1, x if b1 is None else b1, w2, x if b2 is None else b2, y, m, k, h, n,
        *x.stride(), *w1.stride(), *w2.stride(), *y.stride(),
        ACTIVATION=_gemm.ACTIVATIONS[activation], HAS_B1=b1 is not None, HAS_B2=b2 is not None,
        PRECISION=_gemm.precision(x.dtype), BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
        BLOCK_H=config["BLOCK_H"], BLOCK_K=config["BLOCK_K"], EVEN_K=k % config["BLOCK_K"] == 0,
        num_warps=config["num_warps"], num_stages=config["num_stages"],
    )


def _run(x, w1, b1, w2, b2, activation: str, config: dict, out: torch.Tensor | None = None) -> torch.Tensor:
    """The mlp of a 2-D x with one config, into `out` (2-D, any strides) or a new contiguous tensor: the
    fused kernel, or two linear calls with linear's own tuned configs."""
    if config["variant"] == "fused":
        out = x.new_empty((x.shape[0], w2.shape[0])) if out is None else out
        launch_fused(x, w1, b1, w2, b2, out, activation, config)
        return out
    y = linear_rows(linear_rows(x, w1, b1, activation, False)[0], w2, b2, "none", False)[0]
    return y if out is None else out.copy_(y)


def mlp_rows(x, w1, b1, w2, b2, activation: str) -> torch.Tensor:
    """The tuned mlp of a 2-D x: a new contiguous (M, N)."""
    m, k = x.shape
    h, n = w1.shape[0], w2.shape[0]
    if m * n == 0:
        return x.new_empty((m, n))

    def problem() -> dict:
        return {"m": m, "k": k, "h": h, "n": n, "dtype": DTYPE_NAMES[x.dtype]}

    config = _TUNED.lookup(x.dtype, (m, k, h, n), lambda: bucket(problem()), problem)
    runtime.note_launch("mlp", config)
    return _run(x, w1, b1, w2, b2, activation, config)


@torch.library.custom_op("autotune::mlp", mutates_args=())
def _mlp_op(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None, w2: torch.Tensor, b2: torch.Tensor | None,
            activation: str) -> torch.Tensor:
    return mlp_rows(x, w1, b1, w2, b2, activation)


@_mlp_op.register_fake
def _(x, w1, b1, w2, b2, activation):
    return x.new_empty((x.shape[0], w2.shape[0]))


def _mlp_setup(ctx, inputs, output) -> None:
    x, w1, b1, w2, b2, activation = inputs
    ctx.save_for_backward(x, w1, b1, w2)
    ctx.activation, ctx.has_b2 = activation, b2 is not None


def _mlp_backward(ctx, dy):
    x, w1, b1, w2 = ctx.saved_tensors
    act = ctx.activation
    need_x, need_w1, need_b1, need_w2, need_b2, _ = ctx.needs_input_grad
    hidden, z = linear_call(x, w1, b1, act, act != "none")  # recomputed, the pre-activation stored with it
    dw2 = mm(dy.t(), hidden) if need_w2 else None
    db2 = dy.sum(0) if ctx.has_b2 and need_b2 else None
    dz = activation_backward(mm(dy, w2), z, act) if need_x or need_w1 or need_b1 else None
    dx = mm(dz, w1) if need_x else None
    dw1 = mm(dz.t(), x) if need_w1 else None
    db1 = dz.sum(0) if b1 is not None and need_b1 else None
    return dx, dw1, db1, dw2, db2, None


_mlp_op.register_autograd(_mlp_backward, setup_context=_mlp_setup)


class _EagerMlp(torch.autograd.Function):
    """_mlp_op's forward and backward for an eager call that records a graph, without the op's dispatch and
    autograd wrapper (as matmul's _EagerLinear)."""

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2, activation: str):
        _mlp_setup(ctx, (x, w1, b1, w2, b2, activation), None)
        return mlp_rows(x, w1, b1, w2, b2, activation)

    @staticmethod
    def backward(ctx, dy):
        return _mlp_backward(ctx, dy)


def _mlp_call(x, w1, b1, w2, b2, activation: str) -> torch.Tensor:
    """The tuned mlp of a checked 2-D x: through the custom op where torch.compile traces or a tensor subclass
    comes in, through _EagerMlp where an eager call records a graph, else launched directly."""
    if not _checks.eager(x, w1, b1, w2, b2):
        return _mlp_op(x, w1, b1, w2, b2, activation)  # what torch.compile traces; fake tensors run its fake
    if needs_graph(x, w1, b1, w2, b2):
        return _EagerMlp.apply(x, w1, b1, w2, b2, activation)
    return mlp_rows(x, w1, b1, w2, b2, activation)


def mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None, w2: torch.Tensor, b2: torch.Tensor | None,
        activation: str | None = "gelu_tanh") -> torch.Tensor:
    """linear(activation(linear(x, w1, b1)), w2, b2) for x (*, K), w1 (H, K), b1 (H,), w2 (N, H), b2 (N,)
    (biases may be None), without writing the pre-activation to memory; activation None, "relu", "gelu",
    "gelu_tanh" or "silu". float32 multiplies in IEEE float32 (no TF32).

    Differentiable in x and every parameter (the hidden layer is recomputed in the backward), to second
    order (create_graph=True) too; a torch custom op, so it works under torch.compile(fullgraph=True).
    """
    check_dtype("x", x)
    if x.dim() < 1:
        raise ValueError("x must have at least one dim (its last is K), got a 0-d tensor")
    k = x.shape[-1]
    for name, w, cols in (("w1", w1, k), ("w2", w2, None)):
        if not isinstance(w, torch.Tensor) or w.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor, got {tuple(w.shape) if isinstance(w, torch.Tensor) else w!r}")
        check_like(name, w, x, (w.shape[0], w1.shape[0] if cols is None else cols))
    check_like("b1", b1, x, (w1.shape[0],))
    check_like("b2", b2, x, (w2.shape[0],))
    act = check_activation(activation)
    y = _mlp_call(as_rows(x), w1, b1, w2, b2, act)
    return y.view(*x.shape[:-1], w2.shape[0])


def _spec_launch(inputs: Inputs, config: dict, out: torch.Tensor) -> torch.Tensor:
    x = inputs["x"].reshape(-1, inputs["x"].shape[-1])
    _run(x, inputs["w1"], inputs["b1"], inputs["w2"], inputs["b2"], inputs["activation"], config, out.view(x.shape[0], -1))
    return out


def _torch_mlp(inputs: Inputs, dtype: torch.dtype | None, activation: bool = True) -> torch.Tensor:
    def cast(t):
        return t if t is None or dtype is None else t.to(dtype)

    hidden = F.linear(cast(inputs["x"]), cast(inputs["w1"]), cast(inputs["b1"]))
    if activation:
        hidden = apply_activation(hidden, inputs["activation"])
    return F.linear(hidden, cast(inputs["w2"]), cast(inputs["b2"]))


MLP = gemm_spec(
    name="mlp",
    resources=resources,
    space=SPACE,
    launch=_spec_launch,
    reference=lambda inputs: _torch_mlp(inputs, torch.float64),
    baseline=lambda inputs: _torch_mlp(inputs, None),
    problems=problems_.mlp_problems,
    make_inputs=problems_.mlp_inputs,
    bucket=bucket,
    cost=problems_.mlp_cost,
    presets=[problems_.parse_mlp("8192x4096x16384x4096"), problems_.parse_mlp("8192x1024x4096x256")],
    interpreter_presets=[problems_.parse_mlp("33x40x72x24")],
    parse_shape=problems_.parse_mlp,
    sources=(*_gemm.SOURCES, _mlp_fused_kernel),
    description="Linear -> activation -> Linear, the pre-activation never written",
    bucket_edges=problems_.mlp_edges,
    public=lambda inputs: mlp(inputs["x"], inputs["w1"], inputs["b1"], inputs["w2"], inputs["b2"], inputs["activation"]),
    vendor=lambda inputs: _torch_mlp(inputs, None, activation=False),
    error_floor=problems_.mlp_floor,
)

_TUNED = runtime.tuned(MLP)
