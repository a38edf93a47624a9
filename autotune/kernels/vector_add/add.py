"""vector_add: out = x + y, elementwise, any rank."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from hypothesis import strategies as st

from autotune import runtime
from autotune.gate.strategies import magnitudes, shapes
from autotune.kernels.common import checks as _checks
from autotune.kernels.common.grid import cdiv
from autotune.search_spaces.add import SPACE, bucket
from autotune.spec import Cost, Inputs, KernelSpec, parse_sizes


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offsets = start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


def launch(inputs: Inputs, config: dict, out: torch.Tensor) -> torch.Tensor:
    """Add with one config into a contiguous `out`; non-contiguous inputs are read through a copy."""
    x, y = inputs["x"], inputs["y"]
    n = x.numel()
    if n == 0:
        return out
    block = config["BLOCK_SIZE"]
    _add_kernel[(cdiv(n, block),)](
        x.contiguous(), y.contiguous(), out, n,
        BLOCK_SIZE=block, num_warps=config["num_warps"], num_stages=config["num_stages"],
    )
    return out


def reference(inputs: Inputs) -> torch.Tensor:
    return inputs["x"].double() + inputs["y"].double()


def baseline(inputs: Inputs) -> torch.Tensor:
    return inputs["x"] + inputs["y"]


def problems(max_numel: int) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries(
        {
            "shape": shapes(1, 4, max_numel, allow_empty=True),
            "layout": st.sampled_from(["contiguous", "transposed", "sliced"]),
            "magnitude": magnitudes(),
        }
    )


def make_inputs(problem: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    gen = torch.Generator().manual_seed(seed)
    shape = list(problem["shape"])
    layout = problem.get("layout", "contiguous")

    def one() -> torch.Tensor:
        # The layout is made on the device, last: a copy or a move would make a strided view contiguous.
        if layout == "transposed" and len(shape) >= 2:
            base = torch.randn(shape[::-1], generator=gen) * problem.get("magnitude", 1.0)
            return base.to(device=device, dtype=dtype).permute(*range(len(shape) - 1, -1, -1))
        if layout == "sliced" and shape:
            base = torch.randn(shape[:-1] + [2 * shape[-1]], generator=gen) * problem.get("magnitude", 1.0)
            return base.to(device=device, dtype=dtype)[..., ::2]
        return (torch.randn(shape, generator=gen) * problem.get("magnitude", 1.0)).to(device=device, dtype=dtype)

    return {"x": one(), "y": one()}


def cost(problem: dict, dtype: torch.dtype) -> Cost:
    n = 1
    for s in problem["shape"]:
        n *= s
    return Cost(flops=n, bytes=3 * n * dtype.itemsize)


def parse_shape(text: str) -> dict:
    """'1048576' or '4096x4096' -> a contiguous problem of that shape."""
    shape = parse_sizes(text)
    return {"shape": shape, "layout": "contiguous", "magnitude": 1.0}


SPEC = KernelSpec(
    name="vector_add",
    space=SPACE,
    launch=launch,
    reference=reference,
    baseline=baseline,
    problems=problems,
    make_inputs=make_inputs,
    bucket=bucket,
    cost=cost,
    presets=[parse_shape(s) for s in ("1048576", "16777216", "268435456")],
    interpreter_presets=[parse_shape("100000")],
    parse_shape=parse_shape,
    sources=(_add_kernel,),
    description="elementwise x + y",
    public=lambda inputs: add(inputs["x"], inputs["y"]),
)

_TUNED = runtime.tuned(SPEC)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y for two float tensors of one shape, dtype and device, with the tuned config. Differentiable in
    x and y (to any order: the gradient passes through unchanged)."""
    _checks.float_tensor("x", x)
    _checks.float_tensor("y", y)
    _checks.same_device("x", x, "y", y)
    _checks.same_dtype("x", x, "y", y)
    _checks.same_shape("x", x, "y", y)
    if torch.is_grad_enabled() and (x.requires_grad or y.requires_grad):
        return _Add.apply(x, y)
    return _forward(x, y)


class _Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return _forward(x, y)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, grad


def _forward(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    n = x.numel()
    if n == 0:
        return out
    config = _TUNED.lookup(x.dtype, n, lambda: bucket({"shape": [n]}), lambda: {"shape": list(x.shape)})
    runtime.note_launch("vector_add", config)
    return launch({"x": x, "y": y}, config, out)
