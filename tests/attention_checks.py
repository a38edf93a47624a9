"""Shared by the flash_attn tests: run configs through the gate on chosen problems."""

from __future__ import annotations

import torch

from autotune.verify import check_problem

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def assert_passes(spec, config, problems, dtypes=DTYPES) -> None:
    """config runs on every problem (the constraints allow it) and passes the gate there in every dtype."""
    for p in problems:
        assert spec.space.rejects(config, p) is None, (p, spec.space.rejects(config, p))
        for dtype in dtypes:
            failure = check_problem(spec, config, p, dtype)
            assert failure is None, failure.describe()
