"""GPUs not tuned here: where no database holds a kernel's rows for this GPU in the call's dtype, the rows of the
nearest GPU of its architecture family tuned in that dtype serve (an H200 or H20 takes the H100's, an A10 the
A100's), each config first checked against this device's limits (`autotune.device_limits`) and dropped where it does
not fit. Said once per kernel and dtype."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from autotune import device_limits
from autotune.db import BestRow
from autotune.device_limits import DeviceLimits, Resources
from autotune.runtime.databases import read_rows
from autotune.spec import KernelSpec, dtype_from_name

Found = Sequence[tuple[str, "list[BestRow] | Exception"]]


class ServedByAnotherGPUWarning(UserWarning):
    """A kernel has no rows for this GPU in a call's dtype: the rows of the nearest GPU of its family tuned in it
    serve it."""


_warned: set[tuple[str, str, str | None]] = set()  # (kernel, gpu, dtype): said once per process


def nearest(here: DeviceLimits, tuned: Sequence[str]) -> DeviceLimits | None:
    """The tuned GPU of here's family most like it: same compute capability, then same shared memory, then the
    closest SM count; None where none of the family is tuned."""
    donors = [d for d in map(device_limits.limits_of, tuned) if d and d.family == here.family and d.name != here.name]
    if not donors:
        return None
    return min(
        donors,
        key=lambda d: (
            d.compute_capability != here.compute_capability,
            d.shared_memory != here.shared_memory,
            abs(math.log2(d.sms / here.sms)),
            d.name,
        ),
    )


def misfit(spec: KernelSpec, row: BestRow, here: DeviceLimits) -> str | None:
    """Why a row's config cannot run on this device (the kernel's own estimate of what it needs on the row's
    problem), or None when it fits."""
    try:
        config, problem = spec.current_config(row), spec.problem_for(row.problem, dtype_from_name(row.dtype))
        needs = spec.resources(config, problem) if spec.resources else Resources()
    except Exception as exc:  # a row that cannot be judged is not served on a device it was not tuned for
        return f"cannot estimate what it needs ({type(exc).__name__}: {exc})"
    return device_limits.misfit(needs, int(config.get("num_warps", 4)), here)


def when_untuned(spec: KernelSpec, gpu_name: str, found: Found, dtype: str | None = None) -> Found:
    """`found` (each database's rows of spec for gpu_name) where it holds any in `dtype` (any at all where None);
    else the fitting rows of the nearest GPU of the family tuned in `dtype`, warning once which GPU's rows serve
    and which were dropped. Per dtype: a GPU tuned in bf16 alone is still served another GPU's fp16 rows, not the
    default config."""

    def in_dtype(rows: list[BestRow]) -> list[BestRow]:
        return [r for r in rows if dtype is None or r.dtype == dtype]

    if any(isinstance(rows, list) and in_dtype(rows) for _, rows in found):
        return found
    here = device_limits.limits_here()
    if here is None or here.name != gpu_name:
        return found
    everything = read_rows(spec.name)
    tuned = {r.gpu for _, rows in everything if isinstance(rows, list) for r in in_dtype(rows)}
    donor = nearest(here, sorted(tuned))
    if donor is None:
        return found
    served, dropped, kept = [], [], 0
    for url, rows in everything:
        if isinstance(rows, Exception):
            served.append((url, rows))
            continue
        fitting = []
        for row in (r for r in in_dtype(rows) if r.gpu == donor.name):
            reason = misfit(spec, row, here)
            if reason:
                dropped.append(f"{row.dtype} {row.bucket} {row.config_json}: {reason}")
            else:
                fitting.append(row)
        kept += len(fitting)
        served.append((url, fitting))
    if (spec.name, gpu_name, dtype) not in _warned:
        _warned.add((spec.name, gpu_name, dtype))
        note = f"; dropped {len(dropped)} that do not fit it: " + "; ".join(dropped[:5]) if dropped else ""
        tuned_in = f"tuned {dtype} configs" if dtype else "tuned configs"
        warnings.warn(
            f"autotune: no {tuned_in} for {spec.name} on {gpu_name}: serving the {donor.name}'s ({kept} row(s)), "
            f"the nearest tuned GPU of the {here.family} family{note} (`autotune search {spec.name}` tunes it here)",
            ServedByAnotherGPUWarning,
            stacklevel=5,
        )
    return served
