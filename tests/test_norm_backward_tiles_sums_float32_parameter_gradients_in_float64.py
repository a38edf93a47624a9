"""The norm backward's tiles kernel on 16-bit data with float32 parameters: the weight's (and bias's) gradient, a
column sum over rows that cancels to far below its terms and is judged at float32's resolution, comes out right to
float32's own slack, not merely within a multiple of torch's float32 error (which varies from device to device).

The problem is the one on which the H100's gate recorded every tiles config incorrect (rms_norm_backward, bf16,
bucket 4096x4096): its dweight was 6-8x torch's error off where the float32 row statistics and terms were kept."""

from __future__ import annotations

import pytest
import torch

from autotune.gate.compare import FP32_SLACK_ULPS, compare, outputs_like
from autotune.gate.verify import check_problem
from autotune.kernels.norm import layer_norm_backward_tiles as tiles
from autotune.kernels.norm.layer_norm_backward import LAYER_NORM_BACKWARD, RMS_NORM_BACKWARD
from autotune.search_spaces.layer_norm import BACKWARD_SPACE as SPACE

pytestmark = [
    pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight"),
]

FAILED_ON_H100 = {
    "bias": False, "eps": 0.1, "fp32_params": True, "layout": "strided", "magnitude": 10000.0, "norm_dims": 1,
    "residual": False, "shape": [3, 4096], "values": "random", "weight": True,
}  # fmt: skip
CONFIGS = {
    "partials_read_once": {"variant": "partials", "BLOCK_N": 4096, "READS": 1, "PROGRAMS_PER_SM": 2, "num_warps": 8,
                           "num_stages": 2},
    "atomic_read_twice": {"variant": "atomic", "BLOCK_N": 4096, "READS": 2, "PROGRAMS_PER_SM": 4, "num_warps": 8,
                          "num_stages": 3},
    "partials_in_chunks": {"variant": "partials", "BLOCK_N": 4096, "READS": 2, "PROGRAMS_PER_SM": 1, "num_warps": 8,
                           "num_stages": 2},
}  # fmt: skip
SHAPES = {"partials_in_chunks": [3, 16411]}
"""Where a config needs rows of another width than the failing problem's: chunks are for rows past 16384."""
SEEDS = {"partials_in_chunks": (0,)}
"""Input seeds per config, where not 0-2: those rows are slow under the interpreter."""
FLOAT32_SLACK = torch.finfo(torch.float32).eps * (1 + FP32_SLACK_ULPS)
"""The gate's budget less its multiple of torch's error: a float32 output's ulp and the compute slack."""


def tiles_config(name: str) -> dict:
    return SPACE.validate({**CONFIGS[name], "kernel": "tiles", "BLOCK_M": 1})


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("name", "seed"), [(name, seed) for name in CONFIGS for seed in SEEDS.get(name, (0, 1, 2))])
@pytest.mark.parametrize("spec", [RMS_NORM_BACKWARD, LAYER_NORM_BACKWARD], ids=["rms_norm", "layer_norm"])
def test_float32_parameter_gradients_are_right_to_float32s_slack(spec, name, dtype, seed):
    shape = SHAPES.get(name, FAILED_ON_H100["shape"])
    problem = spec.problem_for({**FAILED_ON_H100, "shape": shape, "bias": spec is LAYER_NORM_BACKWARD}, dtype)
    config = tiles_config(name)
    assert SPACE.rejects(config, problem) is None
    assert check_problem(spec, config, problem, dtype, seed=seed) is None
    inputs = spec.make_inputs(problem, dtype, torch.device("cpu"), seed)
    base, ref = spec.baseline(inputs), spec.reference(inputs)
    out = outputs_like(base)
    spec.launch(inputs, config, out)
    for i, (ours, exact) in enumerate(zip(out[1:], ref[1:], strict=True), start=1):
        assert ours.dtype == torch.float32
        error = compare(ours, exact, ours, torch.float32)[0]
        assert error <= FLOAT32_SLACK, f"output {i}: error {error:.3g} > {FLOAT32_SLACK:.3g}"


def test_only_float32_gradients_of_16_bit_data_are_summed_in_float64():
    assert tiles.fine(torch.bfloat16, [torch.float32]) and tiles.fine(torch.float16, [torch.bfloat16, torch.float32])
    assert not tiles.fine(torch.bfloat16, [torch.bfloat16]) and not tiles.fine(torch.float16, [])
    assert not tiles.fine(torch.float32, [torch.float32])  # float64 throughout already
    assert tiles.partials_dtype(torch.bfloat16, [torch.float32]) == torch.float64
    assert tiles.partials_dtype(torch.bfloat16, [torch.bfloat16]) == torch.float32
    assert tiles.partials_dtype(torch.float32, [torch.float32]) == torch.float64
