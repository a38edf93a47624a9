"""The gate on a kernel of one's own: a config-dependent bug planted in a decorated launcher is caught by
`autotune verify` with a minimal failing problem, and outputs the launcher allocates itself are poisoned, so an
element it never writes fails even where the allocator hands back memory holding the right answer."""

import json

import torch
import triton
import triton.language as tl
import user_kernels
from click.testing import CliRunner

import autotune
from autotune.cli import main
from autotune.gate.verify import verify


def test_verify_fails_the_buggy_block_with_a_minimal_problem_and_passes_the_other():
    runner = CliRunner()
    bad = runner.invoke(
        main, ["verify", "user_kernels:tail_bug_axpy", "--config", json.dumps({"BLOCK": 256}), "--examples", "40"]
    )
    assert bad.exit_code == 1, bad.output
    assert "FAIL" in bad.output and '"sizes": {"n": 257}' in bad.output  # one element past the first block
    good = runner.invoke(
        main, ["verify", "user_kernels:tail_bug_axpy", "--config", json.dumps({"BLOCK": 128}), "--examples", "40"]
    )
    assert good.exit_code == 0, good.output


def test_the_shrunk_failure_is_just_past_one_block():
    spec = user_kernels.tail_bug_axpy.spec
    result = verify(
        spec, {"BLOCK": user_kernels.BUG_BLOCK, "num_warps": 2, "num_stages": 3}, torch.float32, examples=40, seed=3
    )
    assert not result.passed and result.failure.kind == "incorrect"
    n = result.failure.problem["sizes"]["n"]
    assert user_kernels.BUG_BLOCK < n < 2 * user_kernels.BUG_BLOCK and n % user_kernels.BUG_BLOCK


@triton.jit
def _copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n - 1  # the planted bug: the last element is never written
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


def _forgets_last(x, *, config):
    out = torch.empty_like(x)  # what the allocator hands back may hold the reference's answer: poisoned
    _copy_kernel[(triton.cdiv(x.numel(), config["BLOCK"]),)](x, out, x.numel(), **config)
    return out


def test_an_output_element_the_launcher_never_writes_fails():
    kernel = autotune.tune(
        args={"x": autotune.Tensor("n")},
        reference=lambda x: x.clone(),
        configs=[triton.Config({"BLOCK": 64}, num_warps=1)],
        sizes={"n": (1, 300)},
        dtypes=("fp32",),
        name="forgets_last",
    )(_forgets_last)
    result = verify(kernel.spec, kernel.spec.space.default, torch.float32, examples=10)
    assert not result.passed and "unwritten" in result.failure.reason
    assert result.failure.problem["sizes"]["n"] == 1  # the smallest problem: its only element unwritten


def test_scratch_memory_read_before_it_is_written_fails_under_the_gate(user_db):
    def reads_scratch(x, *, config):
        scratch = torch.empty_like(x[:1])  # not an output's shape: scratch, NaN under the gate
        return x + scratch.sum() * 0

    kernel = autotune.tune(
        args={"x": autotune.Tensor("n")},
        reference=lambda x: x.clone(),
        configs=[triton.Config({"BLOCK": 64})],
        sizes={"n": (2, 64)},
        dtypes=("fp32",),
        name="reads_scratch",
    )(reads_scratch)
    result = verify(kernel.spec, kernel.spec.space.default, torch.float32, examples=5)
    assert not result.passed and "nan" in result.failure.reason.lower()
    x = torch.randn(10)
    torch.testing.assert_close(kernel(x), x)  # outside the gate nothing is poisoned


def test_a_launcher_returning_the_wrong_dtype_fails_with_a_clear_reason():
    kernel = autotune.tune(
        args={"x": autotune.Tensor("n")},
        reference=lambda x: x * 2,
        configs=[triton.Config({"BLOCK": 64})],
        dtypes=("fp16",),
        name="wrong_dtype",
    )(lambda x, *, config: (x * 2).float())
    result = verify(kernel.spec, kernel.spec.space.default, torch.float16, examples=3)
    assert not result.passed and result.failure.kind == "error"
    assert "output 0 is torch.float32" in result.failure.reason and "torch.float16" in result.failure.reason
