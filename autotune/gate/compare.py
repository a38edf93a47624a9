"""Comparing a kernel's outputs with float64: the error budget earned from PyTorch's own error in the same dtype, a
storage ulp and a little float32 compute slack, element by element and over the whole tensor (normwise); NaN never
passes, and outputs must have the reference's shapes."""

from __future__ import annotations

import torch

from autotune.identity import problem_key
from autotune.space import Problem
from autotune.spec import KernelSpec

FACTOR = 4.0
"""How many times PyTorch's own same-dtype error a candidate may have."""
FP32_SLACK_ULPS = 64
"""Compute slack in fp32 ulps: kernels accumulate in fp32 but may order or approximate differently."""


def storage_eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


Outputs = torch.Tensor | tuple[torch.Tensor, ...]
"""What a kernel writes: one tensor, or a tuple of them (y and the residual sum; dx, dweight, dbias)."""


def outputs_like(base: Outputs, fill: float | None = float("nan")) -> Outputs:
    """Fresh tensors shaped like `base` (a tensor or a tuple of them), filled with `fill` (None: unset)."""
    if isinstance(base, torch.Tensor):
        if fill is None:
            return base.new_empty(base.shape)
        return torch.full(base.shape, fill, dtype=base.dtype, device=base.device)
    return tuple(outputs_like(b, fill) for b in base)


def fresh_outputs(spec: KernelSpec, inputs: dict, base: Outputs, fill: float | None = float("nan")) -> Outputs:
    """The outputs a launch of spec writes into, filled with `fill` (None: unset): laid out as its public function
    allocates them (`KernelSpec.outputs`: a channels-last group_norm writes a channels-last y), else dense like
    `outputs_like`."""
    if spec.outputs is None:
        return outputs_like(base, fill)
    out = spec.outputs(inputs, base)
    if fill is not None:
        for t in (out,) if isinstance(out, torch.Tensor) else out:
            t.fill_(fill)
    return out


def compare_outputs(
    out: Outputs, ref: Outputs, base: Outputs, floor: Outputs | None = None
) -> tuple[float, float, str | None]:
    """`compare` for each output, each judged in its own dtype; the first failure, else the worst error."""
    if isinstance(base, torch.Tensor):
        return compare(out, ref, base, base.dtype, floor)
    if isinstance(out, torch.Tensor) or len(out) != len(base):
        return float("inf"), 0.0, f"expected {len(base)} outputs"
    worst = (0.0, 0.0, None)
    for i, (o, r, b) in enumerate(zip(out, ref, base)):
        err, budget, reason = compare(o, r, b, b.dtype, None if floor is None else floor[i])
        if reason:
            return err, budget, f"output {i}: {reason}"
        if budget and err / budget > (worst[0] / worst[1] if worst[1] else 0.0):
            worst = (err, budget, None)
    return worst


def compare(
    out: torch.Tensor, ref: torch.Tensor, base: torch.Tensor, dtype: torch.dtype, floor: torch.Tensor | None = None
) -> tuple[float, float, str | None]:
    """Error of `out` against float64 `ref`, its budget from `base` (PyTorch, same dtype), and why it fails.

    Elementwise relative error with an absolute floor of one ulp at the tensor's scale; with `floor` (the
    spec's error_floor), relative to the larger of the reference and the floor, element by element. Then the
    normwise error, ||out - ref|| / ||size|| (size: that larger of the two per element), within its own budget
    from PyTorch's normwise error: where PyTorch's worst element errs far (tiny gradients, cancellations) the
    elementwise budget is wide, and only the norm catches an error spread over every element (a wrong scale).
    The error and budget returned are the elementwise ones unless the normwise criterion fails. Where
    the reference is not finite (overflow, all -inf rows), the candidate must reproduce it, or PyTorch's
    value where that is not finite either. Where only PyTorch overflowed, the candidate may do the same
    or be judged against the reference like any other element; likewise where the finite reference is past
    the dtype's range (it rounds to an infinity there: that infinity is the correctly rounded answer). NaN
    never passes anywhere else.
    """
    if out.shape != ref.shape:
        return float("inf"), 0.0, f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}"
    o, r, b = (t.detach().to(device=out.device, dtype=torch.float64).reshape(-1) for t in (out, ref, base))
    special = ~torch.isfinite(r)
    if special.any():
        target = torch.where(torch.isfinite(b[special]), r[special], b[special])
        got = o[special]
        same = (got == target) | (torch.isnan(got) & torch.isnan(target))
        if not bool(same.all()):
            i = int(torch.nonzero(~same)[0])
            return float("inf"), 0.0, f"non-finite mismatch: expected {target[i].item()} got {got[i].item()}"
    torch_overflow = ~special & ~torch.isfinite(b)
    rounded = r.to(dtype).to(torch.float64)  # the reference as the output's dtype holds it
    reference_overflow = ~special & torch.isinf(rounded)
    judged = ~special & ~(torch_overflow & (o == b)) & ~(reference_overflow & (o == rounded))
    torch_finite = torch.isfinite(b[judged])
    o, r, b = o[judged], r[judged], b[judged]
    if o.numel() == 0:
        return 0.0, 0.0, None
    if not bool(torch.isfinite(o).all()):
        i = int(torch.nonzero(~torch.isfinite(o))[0])
        return float("inf"), 0.0, f"got {o[i].item()} where the reference is {r[i].item()} (unwritten output?)"
    eps = storage_eps(dtype)
    atol = max(float(r.abs().max()) * eps, torch.finfo(dtype).tiny)
    size = r.abs()
    if floor is not None:
        size = torch.maximum(size, floor.detach().to(device=out.device, dtype=torch.float64).reshape(-1)[judged])
    err = float(((o - r).abs() / (size + atol)).max())
    b, rb, sb = b[torch_finite], r[torch_finite], size[torch_finite]
    base_err = float(((b - rb).abs() / (sb + atol)).max()) if b.numel() else 0.0
    budget = FACTOR * base_err + eps + FP32_SLACK_ULPS * torch.finfo(torch.float32).eps
    if err > budget:
        return err, budget, f"error {err:.3g} > budget {budget:.3g} (PyTorch {dtype} error {base_err:.3g})"
    norm_err, base_norm_err = normwise_error(o, r, size), normwise_error(b, rb, sb)
    # one storage ulp, twice what a correctly rounded output errs normwise: PyTorch may be that exact and a kernel
    # that rounds its fp32 result once not quite (the interpreter's shipped kernels stay under a third of this)
    norm_budget = FACTOR * base_norm_err + eps + FP32_SLACK_ULPS * torch.finfo(torch.float32).eps
    if norm_err > norm_budget:
        reason = f"normwise error {norm_err:.3g} > budget {norm_budget:.3g} (PyTorch {dtype} normwise error "
        return norm_err, norm_budget, reason + f"{base_norm_err:.3g})"
    return err, budget, None


def normwise_error(out: torch.Tensor, ref: torch.Tensor, size: torch.Tensor) -> float:
    """||out - ref|| / ||size|| (2-norms, float64); 0 where size is all zero (the elementwise criterion's
    absolute floor judges an all-zero reference)."""
    denominator = float(torch.linalg.vector_norm(size))
    return float(torch.linalg.vector_norm(out - ref)) / denominator if denominator > 0 else 0.0


class InvalidOutputs(TypeError):
    """A spec's baseline or reference returned something other than the outputs a kernel writes: a bug of
    the spec (or of torch under it), not of the config being checked."""


def _output_shapes(outputs: object) -> list[tuple[int, ...]] | None:
    """The shapes of a tensor or of a non-empty tuple (or list) of tensors; None for anything else."""
    if isinstance(outputs, torch.Tensor):
        return [tuple(outputs.shape)]
    if isinstance(outputs, (tuple, list)) and outputs and all(isinstance(t, torch.Tensor) for t in outputs):
        return [tuple(t.shape) for t in outputs]
    return None


def _describe_outputs(outputs: object) -> str:
    if isinstance(outputs, (tuple, list)):
        return f"a {type(outputs).__name__} of ({', '.join(type(o).__name__ for o in outputs)})"
    return f"a {type(outputs).__name__}"


def check_references(spec: KernelSpec, problem: Problem, base: object, ref: object) -> None:
    """Raise InvalidOutputs unless `base` (spec.baseline's) and `ref` (spec.reference's) are each a tensor
    or a tuple of tensors, alike in count and shapes: what the gate poisons, compares and budgets by."""
    where = problem_key(problem)
    shapes = {}
    for role, outputs in (("baseline", base), ("reference", ref)):
        shapes[role] = _output_shapes(outputs)
        if shapes[role] is None:
            raise InvalidOutputs(
                f"{spec.name}'s {role} returned {_describe_outputs(outputs)} on {where}: expected "
                "a tensor or a tuple of tensors"
            )
    if shapes["baseline"] != shapes["reference"]:
        raise InvalidOutputs(
            f"{spec.name}'s baseline and reference disagree on {where}: output shapes "
            f"{shapes['baseline']} and {shapes['reference']}"
        )
