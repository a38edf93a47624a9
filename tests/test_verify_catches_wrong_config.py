import math

import pytest
import torch
from wrong_kernels import BAD_BLOCK, TAIL_BUG_ADD

import autotune.kernels.vector_add.add as vector_add
from autotune.gate.compare import compare
from autotune.gate.verify import verify


def test_gate_passes_the_buggy_kernel_where_it_is_right():
    result = verify(TAIL_BUG_ADD, TAIL_BUG_ADD.space.with_overrides(BLOCK_SIZE=1024), torch.float32, examples=40)
    assert result.passed and result.examples >= 40


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gate_catches_the_block_size_bug_and_shrinks_to_a_small_failing_shape(dtype):
    config = TAIL_BUG_ADD.space.with_overrides(BLOCK_SIZE=BAD_BLOCK)
    result = verify(TAIL_BUG_ADD, config, dtype, examples=100, seed=1)
    assert not result.passed
    assert result.failure.kind == "incorrect"
    numel = math.prod(result.failure.problem["shape"])
    # The bug needs a partial block after a full one; the shrunk example is just past one block.
    assert BAD_BLOCK < numel < 2 * BAD_BLOCK and numel % BAD_BLOCK
    assert "budget" in result.failure.reason


def test_past_its_shrink_budget_the_gate_still_reports_a_failing_shape_without_running_more():
    config = TAIL_BUG_ADD.space.with_overrides(BLOCK_SIZE=BAD_BLOCK)
    shrunk = verify(TAIL_BUG_ADD, config, torch.float32, examples=100, seed=1)
    unshrunk = verify(TAIL_BUG_ADD, config, torch.float32, examples=100, seed=1, shrink_seconds=0)
    assert not unshrunk.passed and unshrunk.failure.kind == "incorrect"
    numel = math.prod(unshrunk.failure.problem["shape"])
    assert numel > BAD_BLOCK and numel % BAD_BLOCK  # a shape the bug really fails on, replayed
    assert unshrunk.examples < shrunk.examples  # no new problem ran once the budget was spent


def test_shipped_add_passes_in_every_dtype():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for block in (128, 2048, 16384):
            result = verify(vector_add.SPEC, vector_add.SPACE.with_overrides(BLOCK_SIZE=block), dtype, examples=15)
            assert result.passed, result.failure


def test_unwritten_output_fails_because_outputs_are_poisoned():
    def forgets_last(inputs, config, out):
        full = vector_add.launch(inputs, config, torch.empty_like(out))
        out.view(-1)[:-1] = full.view(-1)[:-1]
        return out

    import dataclasses

    spec = dataclasses.replace(vector_add.SPEC, launch=forgets_last)
    result = verify(spec, spec.space.default, torch.float32, examples=10)
    assert not result.passed and "unwritten" in result.failure.reason


def test_compare_never_lets_nan_pass_and_demands_torch_overflow_semantics():
    ref = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    good = ref.float()
    assert compare(good, ref, good, torch.float32)[2] is None
    assert compare(torch.tensor([1.0, float("nan"), 3.0]), ref, good, torch.float32)[2] is not None
    # fp16 overflow: PyTorch gives inf, so the candidate must too.
    ref = torch.tensor([7e4], dtype=torch.float64)
    base = torch.tensor([float("inf")], dtype=torch.float16)
    assert compare(torch.tensor([float("inf")], dtype=torch.float16), ref, base, torch.float16)[2] is None
    assert compare(torch.tensor([65504.0], dtype=torch.float16), ref, base, torch.float16)[2] is not None
    # Where the true value is still finite in fp16 (65510 rounds to 65504) but PyTorch overflowed on the
    # way, the right finite answer passes too, and so does copying PyTorch.
    ref = torch.tensor([1.0, 65510.0], dtype=torch.float64)
    base = torch.tensor([1.0, float("inf")], dtype=torch.float16)
    assert compare(torch.tensor([1.0, 65504.0], dtype=torch.float16), ref, base, torch.float16)[2] is None
    assert compare(base, ref, base, torch.float16)[2] is None
    assert compare(torch.tensor([1.0, 60000.0], dtype=torch.float16), ref, base, torch.float16)[2] is not None
    # Where the true value is past fp16's range (-65524 rounds to -inf) but PyTorch's is finite, the
    # correctly rounded -inf passes, as does a finite answer within budget; +inf, or -inf elsewhere, does not.
    ref = torch.tensor([1.0, -65524.0], dtype=torch.float64)
    base = torch.tensor([1.0, -65504.0], dtype=torch.float16)
    assert compare(torch.tensor([1.0, float("-inf")], dtype=torch.float16), ref, base, torch.float16)[2] is None
    assert compare(base, ref, base, torch.float16)[2] is None
    assert compare(torch.tensor([1.0, float("inf")], dtype=torch.float16), ref, base, torch.float16)[2] is not None
    assert (
        compare(torch.tensor([float("-inf"), -65504.0], dtype=torch.float16), ref, base, torch.float16)[2] is not None
    )


def test_budget_is_earned_from_pytorch_error_not_a_fixed_tolerance():
    ref = torch.linspace(1, 2, 1000, dtype=torch.float64)
    base = ref.to(torch.bfloat16)
    off_by_a_few_ulps = (ref * (1 + 8 * torch.finfo(torch.bfloat16).eps)).to(torch.bfloat16)
    assert compare(base, ref, base, torch.bfloat16)[2] is None
    assert compare(off_by_a_few_ulps, ref, base, torch.bfloat16)[2] is not None
    # The same relative error passes nowhere in fp32.
    assert compare(ref.float() * 1.001, ref, ref.float(), torch.float32)[2] is not None
