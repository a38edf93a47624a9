"""The norm backward kernels' tests run a spec's launch on poisoned gradients with configs of one kernel."""

from __future__ import annotations

import torch

from autotune.search_spaces.layer_norm import BACKWARD_SPACE


def one_read_config(kernel: str, **overrides) -> dict:
    """A backward config of `kernel` reading each row once, small enough for the interpreter."""
    return BACKWARD_SPACE.with_overrides(**{"kernel": kernel, "READS": 1, "PROGRAMS_PER_SM": 2, "num_warps": 2,
                                            "num_stages": 1, **overrides})  # fmt: skip


def launch_poisoned(spec, problem, config: dict, dtype: torch.dtype) -> list[torch.Tensor]:
    """dx and the parameter gradients of `problem`'s inputs (seed 3) by spec.launch with config, into NaN-filled
    tensors: every element must be written."""
    inputs = spec.make_inputs(problem, dtype, torch.device("cpu"), 3)
    grads = [torch.full(inputs["x"].shape, float("nan"), dtype=dtype)]
    grads += [torch.full(inputs[k].shape, float("nan"), dtype=inputs[k].dtype) for k in ("weight", "bias")
              if inputs.get(k) is not None]  # fmt: skip
    spec.launch(inputs, config, tuple(grads))
    return grads
