"""The layer_norm / rms_norm backward's fourth kernel (kernel="tiles_ahead"): the tiles kernel for one-block rows
read once, loading a program's next rows while the current ones' sums reduce, the three sums in one reduction. Its
gradients match the tiles kernel's to rounding and pass the float64 gate (with and without a residual, float32
parameters on 16-bit data, rows the programs do not divide, strided and padded rows); every output is written; the
space draws it where a row is read once; and the rows stored before it keep serving."""

from __future__ import annotations

import optuna
import pytest
import torch
from norm_backward_runs import launch_poisoned, one_read_config

from autotune.gate.verify import verify
from autotune.kernels.norm import problems as _norm_problems
from autotune.kernels.norm.layer_norm_backward import LAYER_NORM_BACKWARD, RMS_NORM_BACKWARD
from autotune.search_spaces.layer_norm import BACKWARD_SPACE as SPACE

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight"),
]

SPECS = {"layer_norm_backward": LAYER_NORM_BACKWARD, "rms_norm_backward": RMS_NORM_BACKWARD}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("kernel", SPECS)
def test_tiles_ahead_computes_what_tiles_computes_to_rounding(kernel, dtype):
    rms = kernel.startswith("rms")
    cases = [  # rows the 4 programs (2 an interpreter "SM") do not divide: the last tiles' next rows are past the end
        (_norm_problems.problem([37, 61], rms=rms, residual=True, layout="strided", values="offset"),
         dict(BLOCK_M=2, BLOCK_N=64, variant="partials")),
        (_norm_problems.problem([9, 13], rms=rms, fp32_params=True, magnitude=1e4, eps=0.1),
         dict(BLOCK_M=1, BLOCK_N=16, variant="atomic")),
        (_norm_problems.problem([5, 1], rms=rms, residual=True, layout="padded"),
         dict(BLOCK_M=4, BLOCK_N=16, num_warps=1, variant="atomic")),
        (_norm_problems.problem([23, 100], rms=rms), dict(BLOCK_M=1, BLOCK_N=128, variant="partials")),
    ]  # fmt: skip
    for p, tiles in cases:
        ours, theirs = (
            launch_poisoned(SPECS[kernel], p, one_read_config(k, **tiles), dtype) for k in ("tiles_ahead", "tiles")
        )
        for a, b in zip(ours, theirs, strict=True):
            assert not a.isnan().any(), (p["shape"], tiles)
            tol = 1e-6 if dtype == torch.float32 else 1e-2 * b.abs().max().item() + 1e-3
            torch.testing.assert_close(a.double(), b.double(), rtol=0, atol=tol, msg=lambda m: f"{p['shape']}: {m}")


@pytest.mark.parametrize("residual", [True, False], ids=["res", "nores"])
@pytest.mark.parametrize("kernel", SPECS)
def test_tiles_ahead_passes_the_float64_gate(kernel, residual):
    rms = kernel.startswith("rms")
    cfg = one_read_config("tiles_ahead", variant="atomic", BLOCK_M=2, BLOCK_N=512, num_warps=4)
    edges = [
        _norm_problems.problem([3, 509], rms=rms, residual=residual, layout="strided", values="offset"),
        _norm_problems.problem([7, 300], rms=rms, residual=residual, magnitude=1e4),
    ]
    assert [SPACE.rejects(cfg, p) for p in edges] == [None, None]
    for dtype in (torch.float32, torch.float16):
        result = verify(SPECS[kernel], cfg, dtype, examples=3, max_numel=2048, seed=7, extra_problems=edges)
        assert result.passed and result.examples >= len(edges), result.failure and result.failure.describe()


def test_the_space_holds_tiles_ahead_where_a_row_is_read_once():
    with_sum, without = (_norm_problems.problem([8192, 4096], rms=False, residual=r) for r in (True, False))
    ahead = one_read_config("tiles_ahead", BLOCK_N=4096, num_warps=16)
    assert SPACE.rejects(ahead, with_sum) is None and SPACE.rejects(ahead, without) is None
    assert "READS must be 1" in SPACE.rejects({**ahead, "READS": 2}, without)
    # It holds the next tile beside the current one: rows of at most 8 elements a thread, at most 16 warps.
    assert SPACE.rejects({**ahead, "BLOCK_M": 2}, without) is None
    assert "at most 16 warps" in SPACE.rejects({**ahead, "num_warps": 32}, without)
    wide = _norm_problems.problem([8192, 8192], rms=False)
    assert "BLOCK_N > 8 elements per thread" in SPACE.rejects({**ahead, "BLOCK_N": 8192}, wide)
    inputs = LAYER_NORM_BACKWARD.make_inputs(_norm_problems.problem([4, 8], rms=False), torch.float32,
                                             torch.device("cpu"), 0)  # fmt: skip
    with pytest.raises(ValueError, match="tiles_ahead' needs READS=1"):
        LAYER_NORM_BACKWARD.launch(
            inputs, {**one_read_config("tiles_ahead", BLOCK_N=16), "READS": 2}, (torch.empty(4, 8),) * 3
        )


def test_a_search_draws_tiles_ahead_with_rows_at_once():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
    p = _norm_problems.problem([8192, 2048], rms=True)
    drawn = [SPACE.suggest(study.ask(), p) for _ in range(120)]
    runnable = [c for c in drawn if c["kernel"] == "tiles_ahead" and SPACE.rejects(c, p) is None]
    assert runnable and any(c["BLOCK_M"] > 1 for c in runnable)


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS)
def test_the_rows_stored_before_tiles_ahead_stay_current_and_serve_until_it_has_rows(spec):
    *_, before_ahead = spec.extends
    assert before_ahead.source_hash == "a33b1c14e9f05fb3", "the hash the shipped tiles_early rows were searched under"
    assert spec.source_hash != before_ahead.source_hash
    assert spec.is_current(before_ahead.source_hash, one_read_config("tiles_early", BLOCK_N=16))
    assert not spec.is_current(before_ahead.source_hash, one_read_config("tiles_ahead", BLOCK_N=16))
    assert spec.age(before_ahead.source_hash) == 1
