"""One patch of one model in progress: its changes, each with the step that undoes it, and the checks that
decide whether fusing two modules is safe.

Modules are changed in place: a module keeps its identity, parameters, buffers and hooks, and gets a subclass of
its own class whose forward runs the kernels (`swap_class`); an activation fused into the module before it is
replaced in its parent by nn.Identity (`replace_child`). Undoing restores both."""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable

import torch

from autotune.patching.report import Change, PatchReport


class PatchContext:
    """The state of `autotune.patch(model)`: what it changed so far and how to undo it."""

    def __init__(self, model: torch.nn.Module, policy: str) -> None:
        # Weak: the context lives on the model, and a deep copy of the model (which copies its attributes but not
        # the undo steps' modules) keeps a reference to the original here, so unpatch can tell the two apart.
        self._model = weakref.ref(model)
        self.policy = policy
        self.report = PatchReport(policy)
        self._undo: list[Callable[[], None]] = []
        self._done: set[int] = set()
        self._uses = Counter(id(m) for _, m in model.named_modules(remove_duplicate=False))

    @property
    def model(self) -> torch.nn.Module | None:
        return self._model()

    def modules(self) -> list[tuple[str, torch.nn.Module]]:
        """(path, module) of every module of the model, each once, that no earlier step has changed."""
        return [(path, m) for path, m in self.model.named_modules() if id(m) not in self._done]

    def record(self, path: str, module: torch.nn.Module | str, now: str, note: str = "") -> None:
        was = module if isinstance(module, str) else type(module).__name__
        self.report.changes.append(Change(path, was, now, note))

    def swap_class(self, module: torch.nn.Module, cls: type, **attrs: object) -> None:
        """module becomes an instance of cls (a subclass of its class) with attrs set on it; undone in reverse."""
        old_cls, saved = type(module), {k: module.__dict__[k] for k in attrs if k in module.__dict__}
        module.__class__ = cls
        for name, value in attrs.items():
            setattr(module, name, value)

        def undo() -> None:
            for name in attrs:
                module.__dict__.pop(name, None)
            module.__dict__.update(saved)
            module.__class__ = old_cls

        self._undo.append(undo)
        self._done.add(id(module))

    def replace_child(self, parent: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
        old = parent._modules[name]
        setattr(parent, name, new)
        self._undo.append(lambda: setattr(parent, name, old))
        self._done.add(id(old))

    def on_undo(self, step: Callable[[], None]) -> None:
        """Run step when the patch is undone (after the changes made later, before those made earlier)."""
        self._undo.append(step)

    def mark_done(self, module: torch.nn.Module) -> None:
        """Later steps leave module alone (it was changed or judged already)."""
        self._done.add(id(module))

    def fusion_blocker(self, module: torch.nn.Module, activation: torch.nn.Module) -> str | None:
        """Why the activation cannot be fused into the module it follows, or None: the module must serve this one
        place only (a fused one applies the activation wherever it is called), and neither may carry hooks
        (they would see the activated output, or be dropped with the activation)."""
        if id(module) in self._done:
            return "already changed by another rule"
        if self._uses[id(module)] > 1:
            return f"{type(module).__name__} is used at more than one place in the model"
        for m in (module, activation):
            if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
                return f"{type(m).__name__} has hooks"
        return None

    def undo(self) -> None:
        """Restore every change, newest first."""
        while self._undo:
            self._undo.pop()()
