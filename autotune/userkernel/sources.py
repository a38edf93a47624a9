"""What a tuned launcher's stored rows are tied to: the launcher's own source (its decorators left out, so a
changed reference or size range keeps the rows) and the source of every @triton.jit function it reaches."""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable
from typing import Any

from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

KERNELS = (JITFunction, InterpretedFunction)
"""What @triton.jit makes: a JITFunction, or under the interpreter an InterpretedFunction."""


def launcher_source(fn: Callable) -> str:
    """The launcher's source from its `def` line on; where no source exists (a REPL), its code object's
    bytecode and constants (so an edited launcher still gets a new hash)."""
    try:
        text = textwrap.dedent(inspect.getsource(fn))
        node = ast.parse(text).body[0]
        return "\n".join(text.splitlines()[node.lineno - 1 :])
    except (OSError, TypeError, SyntaxError, IndexError):
        code = fn.__code__
        return repr((code.co_code, code.co_consts, code.co_names))


def jit_functions(fn: Callable) -> list[Any]:
    """The @triton.jit functions a launcher refers to by a global or closure name, and those they call in turn,
    in the order first met."""
    found: dict[int, Any] = {}

    def visit(function: Any) -> None:
        for value in _referenced(function):
            kernel = _unwrap(value)
            if kernel is not None and id(kernel) not in found:
                found[id(kernel)] = kernel
                visit(kernel.fn)

    visit(fn)
    return list(found.values())


def _unwrap(value: Any) -> Any:
    """The @triton.jit function in value: itself, or under triton.autotune / triton.heuristics wrappers (`.fn`)."""
    for _ in range(8):
        if isinstance(value, KERNELS):
            return value
        try:
            value = None if isinstance(value, types.ModuleType) else getattr(value, "fn", None)
        except Exception:  # an object whose attribute lookup itself fails refers to no kernel
            return None
        if value is None:
            return None
    return None


def _referenced(function: Any) -> list[Any]:
    code = getattr(function, "__code__", None)
    if code is None:
        return []
    names: list[str] = []
    stack = [code]
    while stack:  # nested code: comprehensions, lambdas and inner functions of the launcher
        c = stack.pop()
        names.extend(c.co_names)
        stack.extend(const for const in c.co_consts if isinstance(const, types.CodeType))
    scope = getattr(function, "__globals__", {})
    values = [scope[n] for n in dict.fromkeys(names) if n in scope]
    for cell in getattr(function, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    return values
