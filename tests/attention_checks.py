"""Shared by the flash_attn tests: run configs through the gate on chosen problems."""

from __future__ import annotations

import torch

from autotune.gate.verify import check_problem

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def assert_passes(spec, config, problems, dtypes=DTYPES) -> None:
    """config runs on every problem (the constraints allow it) and passes the gate there in every dtype."""
    for p in problems:
        assert spec.space.rejects(config, p) is None, (p, spec.space.rejects(config, p))
        for dtype in dtypes:
            failure = check_problem(spec, config, p, dtype)
            assert failure is None, failure.describe()


def fitting(spec, config: dict, problem: dict, dtype: torch.dtype) -> dict:
    """config with its tiles shrunk (stages cut to 2, then the larger block halved, and warps halved where
    they would idle) until the space accepts it on problem in dtype: the same variant, where its 16-bit
    tiles would not fit float32's."""
    config = dict(config)
    while (why := spec.space.rejects(config, spec.problem_for(problem, dtype))) is not None:
        if config["num_stages"] > 2 and "shared memory" in why:
            config["num_stages"] -= 1
        elif "idle warps" in why and config["num_warps"] > 2:
            config["num_warps"] //= 2
        elif max(config["BLOCK_M"], config["BLOCK_N"]) > 16:
            larger = "BLOCK_M" if config["BLOCK_M"] >= config["BLOCK_N"] else "BLOCK_N"
            config[larger] //= 2
        else:
            raise AssertionError(f"{config} does not fit {problem} in {dtype}: {why}")
    return config
