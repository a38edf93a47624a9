"""Kernels written as a user of autotune writes them (through @autotune.tune), not part of the package: the
tests load them by `user_kernels:NAME` as the command line does."""

import torch
import triton
import triton.language as tl

import autotune  # first: without a GPU it switches the Triton interpreter on before Triton is imported

BUG_BLOCK = 256


@triton.jit
def _axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (alpha * x + y).to(out_ptr.dtype.element_ty), mask=mask)


@autotune.tune(
    args={"x": autotune.Tensor("n"), "y": autotune.Tensor("n")},
    reference=lambda x, y, alpha=2.0: alpha * x + y,
    configs=[
        triton.Config({"BLOCK": b}, num_warps=w, num_stages=s) for b in (128, 256, 1024) for w in (2, 4) for s in (1, 2)
    ],
    key=("n",),
    sizes={"n": (0, 1 << 16)},
    dtypes=("fp32", "fp16"),
)
def axpy(x, y, alpha=2.0, *, config):
    """alpha * x + y, elementwise."""
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        _axpy_kernel[(triton.cdiv(n, config["BLOCK"]),)](x, y, out, n, alpha, **config)
    return out


@triton.jit
def _tail_bug_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # The planted bug: with BLOCK_BUG blocks, the last partial block is not stored.
    limit = n - n % BLOCK if BLOCK == 256 and n > BLOCK else n
    mask = offsets < limit
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (alpha * x + y).to(out_ptr.dtype.element_ty), mask=mask)


@autotune.tune(
    args={"x": autotune.Tensor("n"), "y": autotune.Tensor("n")},
    reference=lambda x, y, alpha=2.0: alpha * x + y,
    configs=[triton.Config({"BLOCK": 128}, num_warps=2), triton.Config({"BLOCK": BUG_BLOCK}, num_warps=2)],
    sizes={"n": (1, 1 << 12)},
    dtypes=("fp32",),
)
def tail_bug_axpy(x, y, alpha=2.0, *, config):
    """axpy that skips the tail when BLOCK is 256 and there is more than one block."""
    out = torch.empty_like(x)
    _tail_bug_kernel[(triton.cdiv(x.numel(), config["BLOCK"]),)](x, y, out, x.numel(), alpha, **config)
    return out


@triton.jit
def _scale_rows_kernel(x_ptr, w_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, cols, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < cols
        x = tl.load(x_ptr + row * cols + offsets, mask=mask).to(tl.float32)
        w = tl.load(w_ptr + offsets, mask=mask).to(tl.float32)
        tl.store(out_ptr + row * cols + offsets, (x * w).to(out_ptr.dtype.element_ty), mask=mask)


@autotune.tune(
    args={"x": autotune.Tensor("m", "n"), "w": autotune.Tensor("n")},
    reference=lambda x, w: (x * w, x.sum(-1)),
    configs=[triton.Config({"BLOCK": 64}, num_warps=1), triton.Config({"BLOCK": 32}, num_warps=2)],
    key=("n",),
    sizes={"m": (1, 8), "n": (1, 512)},
    dtypes=("fp32",),
)
def scale_rows(x, w, *, config):
    """x * w row by row, and x's row sums (by torch: a second output)."""
    out = torch.empty_like(x)
    if x.numel():
        _scale_rows_kernel[(x.shape[0],)](x, w, out, x.shape[1], **config)
    return out, x.sum(-1)


def _staged_bytes(config, problem):
    """What axpy would stage in shared memory if it pipelined its blocks: BLOCK elements of x and y, 64 bytes of
    bookkeeping each, per stage (an estimate for the fallback's fit check, not a measurement)."""
    from autotune.device_limits import Resources

    return Resources(shared_memory=config["BLOCK"] * config["num_stages"] * 128)


@autotune.tune(
    args={"x": autotune.Tensor("n"), "y": autotune.Tensor("n")},
    reference=lambda x, y, alpha=2.0: alpha * x + y,
    configs=[triton.Config({"BLOCK": b}, num_warps=4, num_stages=s) for b in (128, 1024) for s in (1, 2)],
    sizes={"n": (1, 1 << 14)},
    dtypes=("fp32",),
    resources=_staged_bytes,
)
def staged_axpy(x, y, alpha=2.0, *, config):
    """axpy with a shared-memory estimate per config."""
    out = torch.empty_like(x)
    _axpy_kernel[(triton.cdiv(x.numel(), config["BLOCK"]),)](x, y, out, x.numel(), alpha, **config)
    return out
