"""A same-run report drawn: one subplot per kernel, each implementation's share of the GPU's roofline peak
(bandwidth or FLOP/s, as the kernel's cost says) on each shape; its rate where no peak is known (the
interpreter). Saved as a PNG. Needs matplotlib: the `plot` extra."""

from __future__ import annotations

import importlib
import math
import pathlib

from autotune.measure import against
from autotune.measure import report as report_

DRAWN = ("tuned", *against.AGAINST)
"""Implementations drawn, in this order, where the report has them."""


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib() -> None:
    """PlotUnavailable, saying how to install it, unless matplotlib can be imported."""
    try:
        importlib.import_module("matplotlib")
    except ImportError as exc:
        raise PlotUnavailable(f"--plot needs matplotlib ({exc}): pip install 'autotune[plot]'") from None


def plot(report: dict, path: str | pathlib.Path) -> pathlib.Path:
    """Draw `report` (from autotune.report.measure) into a PNG at path, one subplot per kernel."""
    require_matplotlib()
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no display backend

    rows = report_.rows(report)
    if not rows:
        raise ValueError("the report has no measurements to plot")
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    ncols = min(3, len(kernels))
    nrows = math.ceil(len(kernels) / ncols)
    most = max(sum(r["kernel"] == k for r in rows) for k in kernels)  # shapes of the busiest subplot
    fig = Figure(figsize=(max(5.5, 0.45 * most) * ncols, 4.2 * nrows), layout="constrained")
    axes = list(fig.subplots(nrows, ncols, squeeze=False).flat)
    for ax, kernel in zip(axes, kernels):
        _draw(ax, kernel, [r for r in rows if r["kernel"] == kernel])
    for ax in axes[len(kernels) :]:
        ax.set_visible(False)
    title = f"{report['gpu']} ({report['device_name']}), {report['date']}"
    if report["interpreter"]:
        title += "\nTriton interpreter on the CPU: rates of wall-clock times, not GPU timings"
    fig.suptitle(title)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    return path


def _draw(ax, kernel: str, rows: list[dict]) -> None:
    impls = [i for i in DRAWN if any(f"{i} ms" in r for r in rows)]
    by_peak = any(r.get(f"{i} % peak") is not None for r in rows for i in impls)
    column = "% peak" if by_peak else "rate"
    unit = rows[0]["unit"]
    labels = [f"{r['shape']} {r['dtype']}" for r in rows]
    if len(set(labels)) < len(labels):  # one shape in two buckets (a residual or not, a layout)
        labels = [f"{r['shape']} {r['dtype']}\n{r['bucket']}" for r in rows]
    width = 0.8 / len(impls)
    for j, impl in enumerate(impls):
        heights = [_number(r.get(f"{impl} {column}")) for r in rows]
        ax.bar([i + (j - (len(impls) - 1) / 2) * width for i in range(len(rows))], heights, width, label=impl)
    ax.set_xticks(
        range(len(rows)),
        labels,
        rotation=30 if len(rows) > 3 else 0,
        ha="right" if len(rows) > 3 else "center",
        fontsize=7,
    )
    ax.set_ylabel(f"% of peak {unit}" if by_peak else f"{unit} (no peak known)")
    ax.set_title(kernel)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def _number(value) -> float:
    return float("nan") if value is None else float(value)
