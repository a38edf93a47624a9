"""A dispatch mode that records the name of every op dispatched while it is active: which ops a call went through."""

from torch.utils._python_dispatch import TorchDispatchMode


class DispatchedOps(TorchDispatchMode):
    """Names of the ops dispatched while active (`with DispatchedOps() as ops: ...; ops.names`)."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def autotune_ops(names: list[str]) -> list[str]:
    """Those of names that are this package's custom ops."""
    return [name for name in names if name.startswith("autotune.")]
