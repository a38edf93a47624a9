"""Test-only kernel whose configs fail in every way a real search meets, next to good ones of three speeds.

`mode` picks how a config behaves: fast / medium / slow are right (slower ones sleep in the launcher);
raise fails in its launcher, compile fails to build, wrong computes x - y, hang never returns, exit and
segv kill their process (standing in for a compiler or driver crash, or a context the CPU cannot poison),
and, on a GPU only, oob stores 2**40 elements past the end of its output: an illegal memory access, which
leaves the process's CUDA context unusable.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import triton
import triton.language as tl

import autotune.kernels.vector_add.add as vector_add
from autotune import gpu
from autotune.space import Param, SearchSpace

ON_GPU = not gpu.interpreter_active()
MODES = ("medium", "raise", "hang", "fast", "exit", "wrong", "segv", "compile", "slow") + (("oob",) if ON_GPU else ())
"""In grid order: every failure is followed by a good config, which a fresh worker must still get right."""
EXPECTED = {
    "fast": "ok",
    "medium": "ok",
    "slow": "ok",
    "raise": "error",
    "wrong": "incorrect",
    "compile": "compile_error" if ON_GPU else "error",  # the interpreter fails a static_assert when it runs
    "hang": "timeout",
    "exit": "crashed",
    "segv": "crashed",
    "oob": "crashed",
}
"""The outcome each mode must be recorded with."""
SLEEP_S = {"fast": 0.0, "medium": 0.005, "slow": 0.02}
BLOCK = 1024
FAR = 1 << 40


@triton.jit
def _fault_add_kernel(
    x_ptr,
    y_ptr,
    out_ptr,
    n,
    BLOCK_SIZE: tl.constexpr,
    WRONG: tl.constexpr,
    BROKEN: tl.constexpr,
    OUT_SHIFT: tl.constexpr,
):
    tl.static_assert(BROKEN == 0, "injected compile failure")
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    if WRONG:
        z = x - y
    else:
        z = x + y
    # The mask keeps lanes inside n, but OUT_SHIFT (FAR for oob) moves every store far past the output.
    tl.store(out_ptr + OUT_SHIFT + offsets, z.to(out_ptr.dtype.element_ty), mask=mask)


def launch(inputs, config, out):
    mode = config["mode"]
    if mode == "raise":
        raise RuntimeError("injected launch failure")
    if mode == "hang":
        time.sleep(3600)
    if mode == "exit":
        os._exit(3)
    if mode == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(SLEEP_S.get(mode, 0.0))
    x, y = inputs["x"], inputs["y"]
    n = x.numel()
    if n == 0:
        return out
    _fault_add_kernel[(triton.cdiv(n, BLOCK),)](
        x.contiguous(),
        y.contiguous(),
        out,
        n,
        BLOCK_SIZE=BLOCK,
        WRONG=mode == "wrong",
        BROKEN=int(mode == "compile"),
        OUT_SHIFT=FAR if mode == "oob" else 0,
    )
    return out


def _spec(name: str, modes: tuple[str, ...]):
    space = SearchSpace((Param("mode", modes),), default={"mode": "medium"})
    return dataclasses.replace(
        vector_add.SPEC, name=name, space=space, launch=launch, sources=(_fault_add_kernel,), public=None, _hash=[]
    )


FAULT_ADD = _spec("fault_add", MODES)
"""x + y with a config space of faults: see the module docstring."""

HANG_CRASH_ADD = _spec("hang_crash_add", ("medium", "hang", "segv", "fast"))
"""A slice of FAULT_ADD: a hang and a crash between two good configs."""
