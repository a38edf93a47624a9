"""Device identity: the canonical GPU name, its size and peaks, and interpreter detection.

Nothing here imports Triton, so `select_backend()` can still switch the Triton interpreter on.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch

CPU_INTERPRETER = "cpu-interpreter"
"""The GPU name under which interpreter results are stored, so they never mix with GPU rows."""


@dataclass(frozen=True)
class GPUModel:
    """Datasheet figures for one GPU model (dense, no sparsity)."""

    name: str
    pattern: str  # regex matched against torch's device name, case-insensitive
    bandwidth_gbs: float  # HBM/GDDR bandwidth, GB/s
    tflops: dict[str, float]  # dense tensor-core rate per dtype, TFLOP/s


# Datasheet peaks (SXM parts where both exist). Order matters: first match wins.
MODELS: tuple[GPUModel, ...] = (
    GPUModel("H200", r"\bH200\b", 4800, {"bf16": 989, "fp16": 989, "fp32": 67}),
    GPUModel("H100", r"\bH100\b", 3350, {"bf16": 989, "fp16": 989, "fp32": 67}),
    GPUModel("GH200", r"\bGH200\b", 4000, {"bf16": 989, "fp16": 989, "fp32": 67}),
    GPUModel("B200", r"\bB200\b", 8000, {"bf16": 2250, "fp16": 2250, "fp32": 80}),
    GPUModel("A100", r"\bA100\b", 2039, {"bf16": 312, "fp16": 312, "fp32": 19.5}),
    GPUModel("A10G", r"\bA10G\b", 600, {"bf16": 70, "fp16": 70, "fp32": 31}),
    GPUModel("L40S", r"\bL40S\b", 864, {"bf16": 362, "fp16": 362, "fp32": 91.6}),
    GPUModel("L4", r"\bL4\b", 300, {"bf16": 121, "fp16": 121, "fp32": 30}),
    GPUModel("RTX4090", r"RTX 4090", 1008, {"bf16": 165, "fp16": 165, "fp32": 82.6}),
    GPUModel("V100", r"\bV100\b", 900, {"bf16": 0, "fp16": 125, "fp32": 15.7}),
    GPUModel("T4", r"\bT4\b", 320, {"bf16": 0, "fp16": 65, "fp32": 8.1}),
)


@dataclass(frozen=True)
class GPUInfo:
    """What a search or benchmark needs to know about the device it runs on."""

    name: str  # canonical: "H100", ..., or "cpu-interpreter"
    device_name: str  # as the driver reports it
    compute_capability: tuple[int, int] | None
    sm_count: int | None
    memory_bytes: int | None
    peak_bandwidth_gbs: float | None
    peak_tflops: dict[str, float]

    @property
    def is_interpreter(self) -> bool:
        return self.name == CPU_INTERPRETER

    def describe(self) -> list[tuple[str, str]]:
        """(field, value) pairs for people, every value filled: what the interpreter has no figure for
        says why."""
        none = "none: no CUDA device (Triton interpreter)" if self.is_interpreter else "unknown"
        memory = (
            "unknown"
            if not self.memory_bytes
            else f"{self.memory_bytes / 2**30:.1f}"
            + (" (host memory: the interpreter's tensors live there)" if self.is_interpreter else "")
        )
        no_peak = (
            "n/a: interpreter timings are not GPU timings" if self.is_interpreter else "unknown (not in gpu.MODELS)"
        )
        peaks = ", ".join(f"{dtype} {rate:g}" for dtype, rate in self.peak_tflops.items() if rate)
        return [
            ("name", self.name),
            ("device", self.device_name),
            ("compute capability", ".".join(map(str, self.compute_capability)) if self.compute_capability else none),
            ("SMs", str(self.sm_count) if self.sm_count else none),
            ("memory GiB", memory),
            ("peak GB/s (datasheet)", f"{self.peak_bandwidth_gbs:g}" if self.peak_bandwidth_gbs else no_peak),
            ("peak TFLOP/s (datasheet)", peaks or no_peak),
        ]


class GPUMismatchError(RuntimeError):
    """A search was asked to measure a GPU other than the one it runs on."""


def canonical_name(device_name: str) -> str:
    """Map a driver's device name ("NVIDIA H100 80GB HBM3") to a canonical one ("H100")."""
    for model in MODELS:
        if re.search(model.pattern, device_name, re.IGNORECASE):
            return model.name
    # Unknown part: keep its own words, without vendor prefix, as a stable identifier.
    words = re.sub(r"^(NVIDIA|AMD)\s+", "", device_name.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^A-Za-z0-9]+", "-", words).strip("-") or "unknown-gpu"


def normalize_gpu_name(name: str) -> str:
    """Canonical spelling of a user-typed GPU name: "h100" -> "H100"; unknown names kept."""
    for model in MODELS:
        if model.name.lower() == name.strip().lower():
            return model.name
    if name.strip().lower() in (CPU_INTERPRETER, "cpu"):
        return CPU_INTERPRETER
    return name.strip()


def interpreter_active() -> bool:
    """True when Triton kernels run under the Triton interpreter (no GPU)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_JUDGING_STORED_ROWS: contextvars.ContextVar[bool] = contextvars.ContextVar("judging_stored_rows", default=False)


@contextlib.contextmanager
def judging_stored_rows() -> Iterator[None]:
    """Within it, constraints judge stored rows as on the GPU each was timed on: what this machine cannot run
    (an engine only a Hopper GPU has) refuses no row. Merging checks rows of other GPUs so."""
    token = _JUDGING_STORED_ROWS.set(True)
    try:
        yield
    finally:
        _JUDGING_STORED_ROWS.reset(token)


def machine_matters() -> bool:
    """False inside `judging_stored_rows`: constraints about this machine's abilities then pass."""
    return not _JUDGING_STORED_ROWS.get()


def select_backend() -> None:
    """Run Triton under its interpreter when there is no GPU. Must run before Triton is imported."""
    if torch.cuda.is_available() or interpreter_active():
        return
    if "triton" in sys.modules:
        warnings.warn(
            "no GPU found and Triton was imported before autotune: set TRITON_INTERPRET=1 "
            "before importing Triton to run the kernels under the Triton interpreter",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    os.environ["TRITON_INTERPRET"] = "1"


def device() -> torch.device:
    """The device the kernels run on: the current CUDA device, or the CPU under the interpreter."""
    if interpreter_active() or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


@functools.cache
def current_gpu() -> GPUInfo:
    """Identity of the device the kernels run on now."""
    dev = device()
    if dev.type == "cpu":
        return GPUInfo(CPU_INTERPRETER, "Triton interpreter on CPU", None, None, host_memory_bytes(), None, {})
    props = torch.cuda.get_device_properties(dev)
    name = canonical_name(props.name)
    model = next((m for m in MODELS if m.name == name), None)
    return GPUInfo(
        name=name,
        device_name=props.name,
        compute_capability=(props.major, props.minor),
        sm_count=props.multi_processor_count,
        memory_bytes=props.total_memory,
        peak_bandwidth_gbs=model.bandwidth_gbs if model else None,
        peak_tflops=dict(model.tflops) if model else {},
    )


def host_memory_bytes() -> int | None:
    """This machine's physical memory, where the interpreter's tensors live; None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such name
        return None


def require_gpu(requested: str | None, reason: str, info: GPUInfo | None = None) -> GPUInfo:
    """The device here (or `info`, found elsewhere), checked to be the one `requested` names (None or
    'auto': any); GPUMismatchError saying `reason` where it is another."""
    info = info or current_gpu()
    if requested is not None and requested.lower() != "auto" and normalize_gpu_name(requested) != info.name:
        raise GPUMismatchError(
            f"--gpu {requested} asked for, but this machine's device is {info.name} ({info.device_name}); {reason}"
        )
    return info


_warned_timings = False


def warn_if_interpreter_timings() -> None:
    """Say once per process that interpreter timings are not GPU timings."""
    global _warned_timings
    if interpreter_active() and not _warned_timings:
        _warned_timings = True
        print(
            "note: no GPU: kernels run under the Triton interpreter; correctness is real, "
            f"timings are not GPU timings (stored under GPU name '{CPU_INTERPRETER}')",
            file=sys.stderr,
        )
