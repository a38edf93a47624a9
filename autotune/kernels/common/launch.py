"""A call site's launches of one Triton kernel with its arguments bound once (`Prebound`): Triton's
`kernel[grid](...)` binds and specializes every argument on every call (`JITFunction.run`: 8.7-10.3 us a launch of
group_norm's looped kernel on a 2-core CPU, with a stand-in driver; the H100 machine's host runs such Python about
five times slower), where the compiled kernel's own launcher needs only the arguments in order (4.9 us a launch
through `Prebound`, its checks and the launch metadata and hooks Triton passes included). A later call goes
straight to the launcher where everything the binder specialized on is as it was: each
tensor's dtype and 16-byte alignment, every other positional argument but floats equal, the keyword (constexpr and
option) arguments equal, the same device, no pre-run hooks; anything else goes through `kernel[grid](...)` and is
bound again.

On by default with Triton 3.6 compiling for a GPU (AUTOTUNE_PREBOUND=0 turns it off): the arguments it hands the
launcher are checked against `JITFunction.run`'s with a stand-in driver
(tests/test_prebound_launch_hands_the_launcher_what_triton_does.py), and on the H100 (2026-11-28) the public norms'
outputs were bit-equal to Triton's launch (tests/test_gpu_prebound_launch_computes_what_triton_launch_does.py,
`pytest -m gpu`: 4 passed) and the public group_norm + silu's host cost fell from 77.9 to 59.5 us a call (torch:
56.0).
Used by the planned launches (kept per call shape) of group_norm's forward kernels that run one program per group
and of layer_norm's and rms_norm's forward, and by the launches public calls keep per kernel and grid (`kept`):
flash_attn's forward and backward on its Triton engine, rope's forward and backward, the norms' backward,
gated_mlp's backward elementwise step, and the Gluon kernels' public launches, the Hopper GEMM's and the attention
forward's and backward's (kept per grid and constexprs; a TMA descriptor argument is matched by what the binder
specializes it on: dtype, block and layout)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import triton
from triton import knobs
from triton.runtime import driver

from autotune import gpu

VERSIONS = ("3.6.",)
"""Triton versions whose JITFunction.run the launch path mirrors (launcher arguments, binder layout)."""


def enabled() -> bool:
    """Whether call sites bind once: not AUTOTUNE_PREBOUND=0, a Triton of VERSIONS, not the interpreter."""
    return (
        os.environ.get("AUTOTUNE_PREBOUND", "1") != "0"
        and triton.__version__.startswith(VERSIONS)
        and not gpu.interpreter_active()
    )


def planned(kernel: Any, grid: tuple[int, ...]) -> Any:
    """The launch a plan keeps for later calls of kernel on grid: `Prebound` where `enabled()`, else kernel[grid]
    itself (nothing in front of Triton's launch)."""
    return Prebound(kernel, grid) if enabled() else kernel[tuple(grid)]


def kept(table: Any, kernel: Any, grid: tuple[int, ...], role: str = "") -> Any:
    """How a public call launches kernel on grid: the `planned` launch kept with the configs of `table` (a runtime
    table: its `derived`, forgotten with them), so a later call on that grid reuses its binding; None (the gate's
    and the search's launches): kernel[grid], Triton's own. `role` keeps apart the launches of one call that run
    the kernel on one grid with other constexprs (each would undo the other's binding)."""
    if table is None:
        return kernel[grid]
    return table.derived(("launch", kernel, grid, role), lambda: planned(kernel, grid))


def _guard(args: Sequence[Any]) -> tuple:
    """What the binder specializes a call's positional arguments on, as far as a later call must match it."""
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((a.dtype, a.data_ptr() % 16 == 0))
        elif isinstance(a, float):
            key.append(float)
        elif not isinstance(a, (int, str)) and isinstance(getattr(a, "base", None), torch.Tensor):
            # A TMA tensor descriptor: the binder specializes on its dtype, block and shared layout (not its shape,
            # strides or address, which the launcher encodes anew each launch); its padding decides that encoding.
            layout, padding = getattr(a, "layout", None), getattr(a, "padding", None)
            key.append((type(a), a.base.dtype, tuple(a.block_shape), layout, padding))
        else:
            key.append((type(a), a))  # the type too: True == 1, but Triton types a bool i1 and an int i32
    return tuple(key)


class Prebound:
    """kernel[grid](*args, **kwargs) at one call site, later calls launched with the bound arguments (see above).
    Runtime arguments go positionally, constexprs and options (num_warps, num_stages) by keyword."""

    def __init__(self, kernel: Any, grid: tuple[int, ...]):
        self.kernel = kernel
        self.grid = tuple(grid)
        self._through_triton = kernel[self.grid]
        self._grid3 = (*self.grid, *(1,) * (3 - len(self.grid)))
        self._bound: tuple | None = None  # (guard, kwargs, device, compiled, tail of constexpr values)
        self._on = enabled()

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        bound = self._bound
        if bound is not None and not self.kernel.pre_run_hooks:
            guard, bound_kwargs, device, compiled, tail = bound
            if kwargs == bound_kwargs and driver.active.get_current_device() == device and _guard(args) == guard:
                values = (*args, *tail)
                stream = driver.active.get_current_stream(device)
                g0, g1, g2 = self._grid3
                compiled.run(
                    g0,
                    g1,
                    g2,
                    stream,
                    compiled.function,
                    compiled.packed_metadata,
                    compiled.launch_metadata(self.grid, stream, *values),
                    knobs.runtime.launch_enter_hook,
                    knobs.runtime.launch_exit_hook,
                    *values,
                )
                return
        compiled = self._through_triton(*args, **kwargs)
        if self._on:
            self._bind(compiled, args, kwargs)

    def _bind(self, compiled: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Keep what a later call needs, where this call site's arguments fit the launch path (else never bind)."""
        if hasattr(compiled, "result"):
            compiled = compiled.result()
        params = self.kernel.params
        if compiled is None or len(args) > len(params) or any(p.is_constexpr for p in params[: len(args)]):
            return
        if any(not p.is_constexpr for p in params[len(args) :]):
            return  # a runtime argument by keyword: its order in the launch is not the call's
        device = driver.active.get_current_device()
        bound_args, _, _ = self.kernel.device_caches[device][4](*args, **kwargs)
        values = list(bound_args.values())
        if len(values) != len(params) or any(v is not a for v, a in zip(values, args)):
            return
        self._bound = (_guard(args), dict(kwargs), device, compiled, tuple(values[len(args) :]))
