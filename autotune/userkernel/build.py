"""The KernelSpec of a tuned launcher: launch with a config (the launcher's own outputs checked and delivered
into the gate's), the reference in float64 and in the working dtype, the problems, bucket and cost."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from autotune.gate.verify import gate_running
from autotune.space import Config, Problem, SearchSpace
from autotune.spec import DTYPES, Cost, Inputs, KernelSpec, dtype_from_name
from autotune.userkernel.arguments import Arguments
from autotune.userkernel.poison import OutputClaims
from autotune.userkernel.problems import GPU_PRESET_ELEMENTS, INTERPRETER_PRESET_ELEMENTS, ProblemSpace
from autotune.userkernel.sources import jit_functions, launcher_source

Outputs = torch.Tensor | tuple[torch.Tensor, ...]


def as_outputs(kernel: str, role: str, result: Any) -> tuple[torch.Tensor, ...]:
    """A launcher's or reference's result as a tuple of tensors; TypeError naming the role otherwise."""
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, (tuple, list)) and result and all(isinstance(t, torch.Tensor) for t in result):
        return tuple(result)
    raise TypeError(
        f"{kernel}: the {role} returned {type(result).__name__}; expected a tensor or a tuple of "
        "tensors (outputs are returned, not written into arguments)"
    )


def deliver(kernel: str, result: Any, out: Outputs) -> Outputs:
    """Put a launcher's outputs into the gate's `out` (nothing to copy where the launcher allocated `out`
    itself); TypeError where their number, shapes or dtypes are not the reference's."""
    outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
    got = as_outputs(kernel, "launcher", result)
    if len(got) != len(outs):
        raise TypeError(f"{kernel}: the launcher returned {len(got)} output(s), the reference {len(outs)}")
    for i, (g, o) in enumerate(zip(got, outs)):
        if g.shape != o.shape or g.dtype != o.dtype:
            raise TypeError(
                f"{kernel}: output {i} is {g.dtype} {tuple(g.shape)}, where the reference in the "
                f"working dtype gives {o.dtype} {tuple(o.shape)}"
            )
        if g is not o:
            o.copy_(g)
    return out


def _float64(inputs: Inputs) -> Inputs:
    return {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}


def meta_result(reference: Callable, arguments: Arguments, problem: Problem, dtype: torch.dtype) -> Any:
    """What the reference returns for a problem on meta tensors (shapes and dtypes, no data, no work); None if
    it cannot run there or returns no tensors."""
    inputs = {
        name: torch.empty(decl.shape(problem["sizes"]), device="meta", dtype=dtype)
        for name, decl in arguments.tensors.items()
    }
    try:
        result = reference(**inputs, **problem.get("args", {}), **arguments.fixed)
        as_outputs(arguments.kernel, "reference", result)
    except Exception:  # not every op has a meta kernel: callers do without
        return None
    return result


def build_spec(
    fn: Callable,
    *,
    name: str,
    arguments: Arguments,
    problems: ProblemSpace,
    space: SearchSpace,
    reference: Callable,
    dtypes: Sequence[torch.dtype | str] | None,
    presets: Sequence[str | dict] | None,
    cost: Callable[[Problem, torch.dtype], Cost] | None,
    resources: Callable | None,
    public: Callable[[Inputs], Any],
) -> KernelSpec:
    """The KernelSpec verify, search, the runtime and the database see for a tuned launcher."""

    def launch(inputs: Inputs, config: Config, out: Outputs) -> Outputs:
        outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
        with OutputClaims(outs, poison=gate_running()):
            result = fn(**inputs, config=config)
        return deliver(name, result, out)

    # A fresh process (an isolated worker) finds the spec through the launcher's module.
    launch.__module__ = fn.__module__

    def reference64(inputs: Inputs) -> tuple[torch.Tensor, ...]:
        return _single(as_outputs(name, "reference", reference(**_float64(inputs))))

    def baseline(inputs: Inputs) -> tuple[torch.Tensor, ...]:
        return _single(as_outputs(name, "reference", reference(**inputs)))

    def default_cost(problem: Problem, dtype: torch.dtype) -> Cost:
        result = meta_result(reference, arguments, problem, dtype)
        outs = () if result is None else as_outputs(name, "reference", result)
        return problems.cost(problem, dtype, [list(t.shape) for t in outs])

    chosen_presets = [_preset(problems, p) for p in presets] if presets else problems.presets(GPU_PRESET_ELEMENTS)
    return KernelSpec(
        name=name,
        space=space,
        launch=launch,
        reference=reference64,
        baseline=baseline,
        problems=problems.strategy,
        make_inputs=problems.inputs,
        bucket=problems.bucket,
        cost=cost or default_cost,
        presets=chosen_presets,
        interpreter_presets=problems.presets(INTERPRETER_PRESET_ELEMENTS) or chosen_presets,
        parse_shape=problems.parse_shape,
        sources=(launcher_source(fn), *jit_functions(fn)),
        public=public,
        resources=resources,
        dtypes=_dtypes(name, dtypes),
        description=(fn.__doc__ or "").strip().split("\n")[0] or f"tuned launcher {fn.__qualname__}",
    )


def _single(outs: tuple[torch.Tensor, ...]) -> Outputs:
    """One output as a tensor (the gate's form for one), several as a tuple."""
    return outs[0] if len(outs) == 1 else outs


def _preset(problems: ProblemSpace, preset: str | dict) -> Problem:
    if isinstance(preset, str):
        return problems.parse_shape(preset)
    if isinstance(preset, dict):
        return problems.parse_shape(",".join(f"{k}={v}" for k, v in preset.items()))
    raise TypeError(f"{problems.kernel}: presets= holds {preset!r}; expected 'n=4096'-style strings or dicts of sizes")


def _dtypes(kernel: str, dtypes: Sequence[torch.dtype | str] | None) -> tuple[torch.dtype, ...]:
    if dtypes is None:
        return tuple(DTYPES.values())
    if isinstance(dtypes, (str, torch.dtype)):
        dtypes = [dtypes]
    chosen = []
    for d in dtypes:
        if isinstance(d, str):
            try:
                d = dtype_from_name(d)
            except ValueError as exc:
                raise ValueError(f"{kernel}: dtypes= {exc}") from None
        if d not in DTYPES.values():
            raise ValueError(f"{kernel}: dtypes= holds {d}; expected some of {sorted(DTYPES)}")
        chosen.append(d)
    if not chosen:
        raise ValueError(f"{kernel}: dtypes= is empty")
    return tuple(dict.fromkeys(chosen))
