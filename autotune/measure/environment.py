"""Where a measurement ran: the GPU (canonical and driver name, datasheet peaks), the versions and the date, as every
report and benchmark records them."""

from __future__ import annotations

import datetime
import platform

import torch

import autotune
from autotune import gpu


def environment() -> dict:
    """The GPU (canonical and driver name, datasheet peaks), versions and date a report was measured with."""
    import triton

    info = gpu.current_gpu()
    return {
        "gpu": info.name,
        "device_name": info.device_name,
        "peak_bandwidth_gbs": info.peak_bandwidth_gbs,
        "peak_tflops": info.peak_tflops,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cudnn": torch.backends.cudnn.version(),  # sdpa's cuDNN backend (None where torch has no cuDNN)
        "autotune": autotune.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "interpreter": info.is_interpreter,
        "timing": (
            "wall-clock medians under the Triton interpreter on the CPU: not GPU timings"
            if info.is_interpreter
            else "medians of triton.testing.do_bench (L2 cleared before each call), each implementation "
            "timed in two rounds, in order then in reverse, and the two medians averaged"
        ),
    }


def probe_header(env: dict, *details: str) -> str:
    """One line saying where a probe ran (`environment()`'s GPU and versions), what it measured, and when."""
    return "; ".join(
        [
            f"GPU: {env['gpu']} ({env['device_name']})",
            f"torch {env['torch']}",
            f"triton {env['triton']}",
            *details,
            f"date {env['date']}",
        ]
    )
