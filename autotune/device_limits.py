"""What a device can hold, and what a config needs of it: shared memory per program, registers, SMs and the TMA
unit, per GPU model and architecture family. Configs tuned on one GPU are checked against another's limits
before that GPU runs them (`autotune.runtime.fallback`)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune import gpu

REGISTERS_PER_THREAD = 255
"""The most 32-bit registers one thread may use, on every NVIDIA GPU since Kepler."""
REGISTERS_PER_SM = 65536
THREADS_PER_PROGRAM = 1024


@dataclass(frozen=True)
class DeviceLimits:
    """One GPU model's limits (datasheet and CUDA occupancy tables; opt-in shared memory per block)."""

    name: str
    compute_capability: tuple[int, int]
    shared_memory: int  # bytes one program (CUDA block) may use, opt-in maximum
    sms: int
    tma: bool  # a tensor memory accelerator: TMA descriptor loads (Hopper and later)
    registers_per_sm: int = REGISTERS_PER_SM

    @property
    def family(self) -> str:
        """The architecture: GPUs of one family share an instruction set, so one's configs compile on another."""
        return family(self.compute_capability)


@dataclass(frozen=True)
class Resources:
    """What one config needs of the device on a problem (a kernel's own estimate; 0 / False: nothing stated)."""

    shared_memory: int = 0  # bytes per program
    registers_per_thread: int = 0
    tma: bool = False
    resident_programs: int = 0  # programs that must run at once, one per SM (a grid that waits on itself)


def family(cc: tuple[int, int]) -> str:
    """'hopper' for (9, 0), 'ampere' for (8, 0) and (8, 6), ... by compute capability."""
    names = {
        (7, 0): "volta",
        (7, 2): "volta",
        (7, 5): "turing",
        (8, 0): "ampere",
        (8, 6): "ampere",
        (8, 7): "ampere",
        (8, 9): "ada",
        (9, 0): "hopper",
    }
    if cc in names:
        return names[cc]
    return {10: "blackwell", 11: "blackwell", 12: "blackwell-rtx"}.get(cc[0], f"sm_{cc[0]}{cc[1]}")


KIB = 1024
MODELS: dict[str, DeviceLimits] = {
    m.name: m
    for m in (
        DeviceLimits("H100", (9, 0), 227 * KIB, 132, True),
        DeviceLimits("H200", (9, 0), 227 * KIB, 132, True),
        DeviceLimits("H800", (9, 0), 227 * KIB, 132, True),
        DeviceLimits("H20", (9, 0), 227 * KIB, 78, True),
        DeviceLimits("GH200", (9, 0), 227 * KIB, 132, True),
        DeviceLimits("B200", (10, 0), 227 * KIB, 148, True),
        DeviceLimits("A100", (8, 0), 163 * KIB, 108, False),
        DeviceLimits("A800", (8, 0), 163 * KIB, 108, False),
        DeviceLimits("A30", (8, 0), 163 * KIB, 56, False),
        DeviceLimits("A10", (8, 6), 99 * KIB, 72, False),
        DeviceLimits("A10G", (8, 6), 99 * KIB, 80, False),
        DeviceLimits("A40", (8, 6), 99 * KIB, 84, False),
        DeviceLimits("L4", (8, 9), 99 * KIB, 58, False),
        DeviceLimits("L40S", (8, 9), 99 * KIB, 142, False),
        DeviceLimits("RTX4090", (8, 9), 99 * KIB, 128, False),
        DeviceLimits("V100", (7, 0), 96 * KIB, 80, False),
        DeviceLimits("T4", (7, 5), 64 * KIB, 40, False),
    )
}
"""Known models by canonical name (`autotune.gpu.canonical_name`); a GPU here that is not listed is read from
the driver (`limits_here`)."""


def limits_of(name: str) -> DeviceLimits | None:
    """The limits of a GPU model by canonical name, if known."""
    return MODELS.get(name)


def limits_here(info: gpu.GPUInfo | None = None) -> DeviceLimits | None:
    """This device's limits: from the driver on a real GPU (the part as built: an H100 PCIe has fewer SMs than
    the SXM), else the table's entry for its name; None under the interpreter or for an unknown name."""
    info = info or gpu.current_gpu()
    known = MODELS.get(info.name)
    if info.is_interpreter or gpu.device().type != "cuda":
        return known
    import torch

    props = torch.cuda.get_device_properties(gpu.device())
    if gpu.canonical_name(props.name) != info.name:  # `info` names another device than the driver's
        return known
    cc = (props.major, props.minor)
    smem = getattr(props, "shared_memory_per_block_optin", 0) or getattr(props, "shared_memory_per_block", 0)
    return DeviceLimits(
        info.name,
        cc,
        int(smem) or (known.shared_memory if known else 48 * KIB),
        props.multi_processor_count,
        cc >= (9, 0),
        int(getattr(props, "regs_per_multiprocessor", 0)) or REGISTERS_PER_SM,
    )


def misfit(needs: Resources, num_warps: int, limits: DeviceLimits) -> str | None:
    """Why a config needing `needs` with `num_warps` warps cannot run on a device, or None when it fits."""
    if needs.shared_memory > limits.shared_memory:
        return f"needs {needs.shared_memory} bytes of shared memory > {limits.name}'s {limits.shared_memory}"
    if needs.tma and not limits.tma:
        return f"loads through TMA descriptors, which {limits.name} has not"
    if needs.resident_programs > limits.sms:
        return f"needs {needs.resident_programs} programs resident at once > {limits.name}'s {limits.sms} SMs"
    if 32 * num_warps > THREADS_PER_PROGRAM:
        return f"{num_warps} warps > {THREADS_PER_PROGRAM // 32} per program"
    if needs.registers_per_thread > REGISTERS_PER_THREAD:
        return f"needs {needs.registers_per_thread} registers per thread > {REGISTERS_PER_THREAD}"
    registers = needs.registers_per_thread * 32 * num_warps
    if registers > limits.registers_per_sm:
        return f"needs {registers} registers per program > {limits.name}'s {limits.registers_per_sm} per SM"
    return None
