"""A problem too large for the device's memory (the host's, under the interpreter) is refused in one line before
any study starts, not met as an out-of-memory traceback minutes in."""

import pytest
import torch
from click.testing import CliRunner

import autotune.kernels.fused_softmax.softmax as fused_softmax
from autotune import gpu
from autotune.cli import main
from autotune.engine.plan import SearchOptions, check_fits, memory_needed
from autotune.engine.search import search

SMALL_DEVICE = gpu.GPUInfo("H100", "test", (9, 0), 132, 4 * 2**30, 3350, {})


def test_the_issue_command_is_one_error_line(user_db):
    needed = memory_needed(fused_softmax.SPEC, fused_softmax.parse_shape("64x100000000"), torch.float32)
    if (gpu.current_gpu().memory_bytes or 0) >= needed:
        pytest.skip("this device could hold the problem")
    result = CliRunner().invoke(main, ["search", "softmax", "--shape", "64x100000000", "--dtype", "fp32"])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    assert result.stderr.startswith("Error: softmax 64x100000000 in fp32 needs at least 143.1 GiB"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not user_db.exists()  # refused before anything was opened, let alone allocated


def test_the_estimate_counts_the_inputs_outputs_and_their_float64_copies():
    problem = fused_softmax.parse_shape("1024x1048576")  # 2**30 elements: 4 GiB in, 4 GiB out in fp32
    assert memory_needed(fused_softmax.SPEC, problem, torch.float32) == 8 * 2**30 * 3  # and 16 GiB in float64
    assert memory_needed(fused_softmax.SPEC, problem, torch.bfloat16) == 4 * 2**30 * 5
    with pytest.raises(ValueError, match=r"needs at least 24.0 GiB .* more than the H100's memory: 4.0 GiB"):
        check_fits(fused_softmax.SPEC, problem, torch.float32, SMALL_DEVICE)
    check_fits(fused_softmax.SPEC, fused_softmax.parse_shape("1024x1024"), torch.float32, SMALL_DEVICE)
    check_fits(fused_softmax.SPEC, problem, torch.float32, gpu.GPUInfo("X", "x", None, None, None, None, {}))  # unknown


def test_the_library_search_refuses_it_too_before_allocating():
    with pytest.raises(ValueError, match="needs at least"):
        search(fused_softmax.SPEC, fused_softmax.parse_shape("64x100000000"), torch.float32, SearchOptions(trials=1))
