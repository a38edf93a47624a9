"""A tuned launcher under torch.compile: a torch.library custom op around its eager call, its fake (the shapes
and dtypes torch.compile traces with) the user's reference run on fake tensors, so fullgraph=True holds.
Outputs come out contiguous on both sides, so the strides the fake promises are the strides the op gives."""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Callable
from typing import Any

import torch

from autotune.userkernel.arguments import Arguments
from autotune.userkernel.build import as_outputs

_SCALARS = {bool: "bool", int: "int", float: "float", str: "str"}
_ids = itertools.count()


class CompiledCall:
    """The custom op of one tuned launcher and how a call's arguments map onto its schema."""

    def __init__(self, op: Any, params: list[tuple[str, int, Any]], single: bool) -> None:
        self.op, self.params, self.single = op, params, single

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        flat = [args[i] if i < len(args) else kwargs.get(name, default) for name, i, default in self.params]
        outs = self.op(*flat)
        return outs[0] if self.single else tuple(outs)


def _schema_type(arguments: Arguments, name: str, param: inspect.Parameter) -> str | None:
    if name in arguments.tensors:
        return "Tensor"
    value = arguments.fixed.get(name, param.default)
    return _SCALARS.get(type(value))


def compiled_call(
    kernel: str, eager: Callable[..., Any], arguments: Arguments, reference: Callable, single: bool | None
) -> CompiledCall | None:
    """The custom op calling `eager`, or None where the launcher's signature has an argument no schema type fits
    (one without a default that is not a tensor, *args, a default of another type) or the number of outputs is
    unknown (`single` None: the reference did not run on meta tensors). Then torch.compile breaks its graph at
    the call and runs it eagerly."""
    if single is None:
        return None
    params, schema = [], []
    positional = 0
    for name, param in arguments.signature.parameters.items():
        if name == "config":
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            return None
        kind = _schema_type(arguments, name, param)
        if kind is None:
            return None
        index = positional if param.kind is not param.KEYWORD_ONLY else 1 << 30
        positional += param.kind is not param.KEYWORD_ONLY
        params.append((name, index, param.default))
        schema.append(f"{kind} {name}")
    names = [name for name, _, _ in params]

    def run(*flat: Any) -> list[torch.Tensor]:
        outs = as_outputs(kernel, "launcher", eager(**dict(zip(names, flat))))
        return [t.contiguous() for t in outs]

    def fake(*flat: Any) -> list[torch.Tensor]:
        outs = as_outputs(kernel, "reference", reference(**dict(zip(names, flat))))
        return [t.contiguous() for t in outs]

    op_name = f"autotune_user::{re.sub(r'[^0-9A-Za-z_]', '_', kernel)}_{next(_ids)}"
    op = torch.library.custom_op(op_name, run, mutates_args=(), schema=f"({', '.join(schema)}) -> Tensor[]")
    op.register_fake(fake)
    return CompiledCall(op, params, single)
