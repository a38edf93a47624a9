"""What `autotune.patch` did to a model: each module it replaced or routed, each it left on torch, and why."""

from __future__ import annotations

from dataclasses import dataclass, field

from tabulate import tabulate

from autotune.nn import routing

TORCH = "torch"
"""`Change.now` of a module left as it was."""

_POLICIES = {
    "measured": "each call runs the kernels only where this GPU's stored rows for its dtype and shape buckets show "
    "them at least as fast as the torch work they replace (their time_ms summed <= torch's "
    "baseline_time_ms; with autograd, the backward's rows too), else torch: `report.calls()` lists what "
    "each call shape got, and why",
    "always": "forced: every call the kernels take runs them, whatever the stored rows say",
}


@dataclass(frozen=True)
class Change:
    """One module of the model: where it is, what it was, what runs it now (a kernel, or "torch": left as it was)
    and a note (why it was left; what was fused or routed)."""

    path: str
    was: str
    now: str
    note: str = ""

    @property
    def replaced(self) -> bool:
        return self.now != TORCH


@dataclass
class PatchReport:
    """The modules `autotune.patch` replaced and left, under its routing policy ("measured" or "always")."""

    policy: str
    changes: list[Change] = field(default_factory=list)

    @property
    def replaced(self) -> list[Change]:
        return [c for c in self.changes if c.replaced]

    @property
    def left(self) -> list[Change]:
        return [c for c in self.changes if not c.replaced]

    def table(self) -> str:
        rows = [(c.path or "(model)", c.was, c.now, c.note) for c in self.changes]
        return tabulate(rows, headers=("module", "was", "now", "note"), tablefmt="github")

    def calls(self) -> str:
        """The routing of the calls made so far (in this process): each call shape's decision under the
        "measured" policy with its evidence, and the calls torch ran because the kernels do not take them."""
        decided = [(d.kind, d.dtype, d.call, "kernels" if d.routed else TORCH, d.why) for d in routing.decisions()]
        parts = [
            tabulate(decided, headers=("call", "dtype", "sizes", "ran", "evidence"), tablefmt="github")
            if decided
            else "no call has been decided on stored rows yet"
        ]
        fallbacks = [(kind, why, n) for (kind, why), n in routing.fallbacks().items()]
        if fallbacks:
            parts.append(tabulate(fallbacks, headers=("call", "left to torch because", "calls"), tablefmt="github"))
        return "\n\n".join(parts)

    def __str__(self) -> str:
        head = (
            f"autotune.patch: {len(self.replaced)} module(s) replaced or routed, {len(self.left)} left on torch.\n"
            f"Policy {self.policy!r}: {_POLICIES[self.policy]}."
        )
        return head + ("\n\n" + self.table() if self.changes else "\n\nNothing in this model that autotune serves.")
