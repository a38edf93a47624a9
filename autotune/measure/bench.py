"""Timing: medians from triton.testing.do_bench on a GPU, of the call itself (time_ms) or of its CUDA-graph replay,
the GPU's time alone (graph_ms; kernel_ms, which a search ranks configs by); wall-clock medians under the interpreter
(real numbers, but not GPU timings). Roofline metrics from a kernel's cost."""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from autotune import gpu
from autotune.spec import Cost, KernelSpec


def time_ms(
    fn: Callable[[], object], *, warmup_ms: float = 25, rep_ms: float = 100, max_reps: int | None = None
) -> float:
    """Median milliseconds per call of fn.

    do_bench sizes its repetitions by kernel time alone, and clears the L2 cache before each: a 10 us
    kernel at rep_ms=100 costs ~10000 cache clears (about a second). `max_reps` caps the repetitions.
    """
    if gpu.device().type == "cuda":
        import triton.testing

        if max_reps:
            estimate = _estimate_ms(fn)
            rep_ms = min(rep_ms, estimate * max_reps)
            warmup_ms = min(warmup_ms, estimate * max_reps / 4)
        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    fn()  # compile / first-call work stays out of the numbers
    times = []
    deadline = time.perf_counter() + rep_ms / 1000
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def graph_ms(
    fn: Callable[[], object], *, warmup_ms: float = 25, rep_ms: float = 200, max_reps: int | None = None
) -> float | None:
    """Median milliseconds of fn replayed from a CUDA graph (the L2 still cleared before each replay): the GPU
    time without the host's, which time_ms counts wherever a call's host path outlasts the clearing.
    None without a GPU, or (with a warning saying why) where fn cannot be captured."""
    if gpu.device().type != "cuda":
        return None
    try:
        fn()  # first-call work (compiling, a library's lazy setup) stays out of the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return time_ms(graph.replay, warmup_ms=warmup_ms, rep_ms=rep_ms, max_reps=max_reps)
    except Exception as exc:  # a call that cannot be captured gets no graph time, and says why
        reason = str(exc).splitlines()[0] if str(exc) else ""
        warnings.warn(f"no CUDA graph time: {type(exc).__name__}: {reason}", RuntimeWarning, stacklevel=2)
        return None


def kernel_time(
    fn: Callable[[], object], *, warmup_ms: float = 25, rep_ms: float = 100, max_reps: int | None = None
) -> tuple[float, str]:
    """Median milliseconds of fn's GPU work, as a search ranks configs, and how it was timed (one of
    autotune.db.rows.TIMINGS): replayed from a CUDA graph where fn can be captured (a config's host path, up to
    3x its GPU time on small problems, is not the kernel's), time_ms where it cannot (after graph_ms's warning)
    and under the interpreter."""
    graphed = graph_ms(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, max_reps=max_reps)
    if graphed is not None:
        return graphed, "graph"
    method = "do_bench" if gpu.device().type == "cuda" else "wall"
    return time_ms(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, max_reps=max_reps), method


def kernel_ms(
    fn: Callable[[], object], *, warmup_ms: float = 25, rep_ms: float = 100, max_reps: int | None = None
) -> float:
    """kernel_time's milliseconds alone."""
    return kernel_time(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, max_reps=max_reps)[0]


def _estimate_ms(fn: Callable[[], object], calls: int = 5) -> float:
    """Mean milliseconds of a few back-to-back calls, for sizing the measurement."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return max(start.elapsed_time(end) / calls, 1e-3)


@dataclass(frozen=True)
class Rate:
    """Achieved rates of one timing, and the share of the GPU's peak on the kernel's bound."""

    ms: float
    gbs: float
    tflops: float
    pct_peak: float | None

    def headline(self, bound: str) -> str:
        pct = f" ({self.pct_peak:.0f}% of peak)" if self.pct_peak is not None else ""
        if bound == "compute":
            return f"{self.tflops:.1f} TFLOP/s{pct}"
        return f"{self.gbs:.0f} GB/s{pct}"


def rate(cost: Cost, ms: float, *, bound: str, dtype_name: str, info: gpu.GPUInfo | None = None) -> Rate:
    """GB/s, TFLOP/s and % of the GPU's peak for a timed call."""
    info = info or gpu.current_gpu()
    gbs = cost.bytes / ms / 1e6 if ms > 0 else 0.0
    tflops = cost.flops / ms / 1e9 if ms > 0 else 0.0
    if bound == "compute":
        peak = info.peak_tflops.get(dtype_name)
        pct = 100 * tflops / peak if peak else None
    else:
        pct = 100 * gbs / info.peak_bandwidth_gbs if info.peak_bandwidth_gbs else None
    return Rate(ms, gbs, tflops, pct)


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float | None:
    """Measured device-to-device copy bandwidth (bytes read + written), GB/s; None without a GPU."""
    if gpu.device().type != "cuda":
        return None
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device=gpu.device()).random_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    return 2 * src.numel() / ms / 1e6


ROUND_REP_MS = 150
"""do_bench's repetition time in each of the two rounds of `time_balanced`."""


def time_balanced(
    calls: dict[str, Callable[[], object]], graphs: bool, rounds: int = 1
) -> dict[str, tuple[float, float | None] | Exception]:
    """Each call's time in ms (and replayed from a CUDA graph, with `graphs`), or the exception it raised.
    Every call runs once first (compiling Triton or Inductor), then all are timed in the given order
    and again in reverse (`rounds` times), and each time is the mean of its medians: a GPU that heats and clocks down
    over seconds of large products would otherwise favour whichever was timed first (on the H100 torch's linear +
    gelu_tanh ran at 675 TFLOP/s timed first in a process and 603-618 timed after the tuned kernel; an H200 held at its
    700 W cap by a decoder layer's training step ran the same step 9.2-10.0 ms within one 30-step loop)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    results: dict[str, tuple[float, float | None] | Exception] = {}
    for name, fn in calls.items():
        try:
            fn()
        except Exception as exc:
            results[name] = exc
    if gpu.device().type == "cuda":
        torch.cuda.synchronize()
    order = [name for name in calls if name not in results]
    medians: dict[str, list[float]] = {name: [] for name in order}
    for names in (order, order[::-1]) * rounds:
        for name in names:
            if name in results:
                continue
            try:
                medians[name].append(time_ms(calls[name], warmup_ms=25, rep_ms=ROUND_REP_MS))
            except Exception as exc:
                results[name] = exc
    for name in order:
        if name not in results:
            try:
                graphed = graph_ms(calls[name]) if graphs else None
            except Exception as exc:
                results[name] = exc
                continue
            results[name] = (sum(medians[name]) / len(medians[name]), graphed)
    return results


def require_nonzero(spec: KernelSpec, inputs: dict) -> None:
    """Zeros would flatter a kernel (and a tensor core's power draw): every float input must hold values."""
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() and not value.any():
            raise ValueError(f"{spec.name}: input {name!r} is all zeros; benchmarks time random inputs")
