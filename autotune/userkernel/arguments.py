"""A tuned launcher's arguments: which are tensors and by what symbolic sizes, which are drawn or fixed, and
how a call's tensors bind the sizes (checked once per exact shape, never again on the hot path)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis.strategies import SearchStrategy


class Tensor:
    """A tensor argument declared by its sizes: symbol names ("m", "n") shared across arguments, or fixed ints.

    `autotune.Tensor("m", "n")` is a matrix whose rows are `m` and columns `n`; another argument that says "n"
    has as many elements along that dim. The gate draws the symbols' sizes (edge sizes first-class)."""

    def __init__(self, *dims: str | int) -> None:
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, (str, int)) or (isinstance(d, int) and d < 0):
                raise TypeError(f"Tensor dims are symbol names or sizes >= 0, got {d!r}")
            if isinstance(d, str) and not d.isidentifier():
                raise ValueError(f"Tensor dim {d!r} is not a valid symbol name (letters, digits, _)")
        self.dims: tuple[str | int, ...] = dims

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(d for d in self.dims if isinstance(d, str))

    def shape(self, sizes: Mapping[str, int]) -> list[int]:
        """The concrete shape for the symbols' sizes."""
        return [sizes[d] if isinstance(d, str) else d for d in self.dims]

    def __repr__(self) -> str:
        return f"Tensor({', '.join(map(repr, self.dims))})"


@dataclass(frozen=True)
class Arguments:
    """The launcher's declared arguments, in the launcher's parameter order.

    Args:
        tensors: name -> Tensor declaration; positions: name -> index among positional parameters.
        drawn: name -> Hypothesis strategy (scalar arguments the gate varies).
        fixed: name -> value (passed on every gate call as given).
        symbols: every size symbol, in order of first appearance.
    """

    kernel: str
    tensors: dict[str, Tensor]
    positions: dict[str, int]
    drawn: dict[str, SearchStrategy]
    fixed: dict[str, Any]
    symbols: tuple[str, ...]
    signature: inspect.Signature

    def sizes_of(self, shapes: tuple[torch.Size, ...]) -> dict[str, int]:
        """The symbols' sizes a call's tensor shapes (in `tensors` order) bind; ValueError naming the argument
        whose rank or size disagrees."""
        sizes: dict[str, int] = {}
        for (name, decl), shape in zip(self.tensors.items(), shapes):
            if len(shape) != len(decl.dims):
                raise ValueError(
                    f"{self.kernel}: {name} must have {len(decl.dims)} dims {decl.dims}, got shape {tuple(shape)}"
                )
            for dim, size in zip(decl.dims, shape):
                if isinstance(dim, int):
                    if size != dim:
                        raise ValueError(
                            f"{self.kernel}: {name} must have size {dim} where declared, got shape {tuple(shape)}"
                        )
                elif sizes.setdefault(dim, size) != size:
                    raise ValueError(
                        f"{self.kernel}: {name} has {dim}={size}, but an earlier argument has {dim}={sizes[dim]}"
                    )
        return sizes

    def tensors_of(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The declared tensors of a call, checked to be tensors (TypeError naming the argument otherwise)."""
        found = []
        for name, position in self.positions.items():
            value = args[position] if position < len(args) else kwargs.get(name)
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{self.kernel}: {name} must be a torch.Tensor, got {type(value).__name__}")
            found.append(value)
        return found


def declare(kernel: str, fn: Callable, args: Mapping[str, Any]) -> Arguments:
    """Check the `args=` of a `tune` over `fn` against its signature; ValueError/TypeError naming what is wrong."""
    if not isinstance(args, Mapping) or not args:
        raise TypeError(f"{kernel}: args= must be a dict of argument name -> autotune.Tensor(...), strategy or value")
    signature = inspect.signature(fn)
    params = signature.parameters
    if "config" not in params or params["config"].kind not in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise TypeError(
            f"{kernel}: the launcher must take the config as a keyword argument `config` "
            "(def launcher(x, y, *, config): ...)"
        )
    positional = [n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    tensors, positions, drawn, fixed = {}, {}, {}, {}
    for name, value in args.items():
        if name not in params or name == "config":
            raise ValueError(
                f"{kernel}: args= names {name!r}, which is not a parameter of the launcher "
                f"(parameters: {[n for n in params if n != 'config']})"
            )
        if params[name].kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"{kernel}: argument {name!r} is positional-only; the gate passes arguments by name")
        if isinstance(value, Tensor):
            tensors[name] = value
            # A tensor passed by keyword has no position: past every positional parameter.
            positions[name] = positional.index(name) if name in positional else len(params)
        elif isinstance(value, SearchStrategy):
            drawn[name] = value
        else:
            fixed[name] = value
    if not tensors:
        raise ValueError(f"{kernel}: args= declares no autotune.Tensor(...): which arguments are the tensors?")
    required = [
        n
        for n, p in params.items()
        if n != "config"
        and p.default is inspect.Parameter.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and n not in args
    ]
    if required:
        raise ValueError(f"{kernel}: launcher parameter(s) {required} have no default and are not in args=")
    symbols = tuple(dict.fromkeys(s for t in tensors.values() for s in t.symbols))
    return Arguments(kernel, tensors, positions, drawn, fixed, symbols, signature)
