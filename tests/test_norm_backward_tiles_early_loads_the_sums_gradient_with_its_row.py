"""The layer_norm / rms_norm backward's third kernel (kernel="tiles_early"): the tiles kernel for one-block rows read
once with a fused residual, loading the sum's gradient with the row instead of after its sums. It computes what
the tiles kernel computes, bit for bit, passes the float64 gate, and the space draws it only where it differs
from the tiles kernel (a residual, READS=1); the rows stored before it keep serving, the tiles rows ahead of the
first kernel's."""

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


def problem(shape, *, rms=False, **kw):
    return _norm_problems.problem(shape, rms=rms, residual=True, **kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("variant", ["partials", "atomic"])
@pytest.mark.parametrize("kernel", SPECS)
def test_tiles_early_computes_what_tiles_computes_bit_for_bit(kernel, variant, dtype):
    rms = kernel.startswith("rms")
    cases = [
        (problem([37, 61], rms=rms, layout="strided", values="offset"), dict(BLOCK_M=2, BLOCK_N=64)),
        (problem([9, 13], rms=rms, fp32_params=True, magnitude=1e4, eps=0.1), dict(BLOCK_M=1, BLOCK_N=16)),
        (problem([5, 1], rms=rms, layout="padded"), dict(BLOCK_M=4, BLOCK_N=16, num_warps=1)),
    ]
    for p, tiles in cases:
        tiles = {**tiles, "variant": variant}
        ours, theirs = (
            launch_poisoned(SPECS[kernel], p, one_read_config(k, **tiles), dtype) for k in ("tiles_early", "tiles")
        )
        for a, b in zip(ours, theirs, strict=True):
            assert not a.isnan().any()
            assert torch.equal(a, b), (p["shape"], tiles)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("kernel", SPECS)
def test_tiles_early_passes_the_float64_gate(kernel, dtype):
    rms = kernel.startswith("rms")
    cfg = one_read_config("tiles_early", variant="atomic", BLOCK_M=2, BLOCK_N=512)
    edges = [problem([3, 509], rms=rms, layout="strided", values="offset"), problem([4, 300], rms=rms, magnitude=1e4)]
    assert [SPACE.rejects(cfg, p) for p in edges] == [None, None]
    result = verify(SPECS[kernel], cfg, dtype, examples=4, max_numel=2048, seed=5, extra_problems=edges)
    assert result.passed and result.examples >= len(edges), result.failure and result.failure.describe()


def test_the_space_holds_tiles_early_only_where_a_residual_row_is_read_once():
    with_sum, without = problem([8192, 4096]), _norm_problems.problem([8192, 4096], rms=False)
    early = one_read_config("tiles_early", BLOCK_N=4096, num_warps=16)
    assert SPACE.rejects(early, with_sum) is None
    assert SPACE.rejects({**early, "BLOCK_M": 2}, with_sum) is None
    assert "READS must be 1" in SPACE.rejects({**early, "READS": 2}, with_sum)
    assert "a fused residual's gradient: none here" in SPACE.rejects(early, without)
    inputs = LAYER_NORM_BACKWARD.make_inputs(_norm_problems.problem([4, 8], rms=False), torch.float32,
                                             torch.device("cpu"), 0)  # fmt: skip
    with pytest.raises(ValueError, match="tiles_early' needs READS=1 and a fused residual's gradient"):
        LAYER_NORM_BACKWARD.launch(inputs, one_read_config("tiles_early", BLOCK_N=16), (torch.empty(4, 8),) * 3)


def test_a_search_draws_tiles_early_and_runs_it_only_on_a_residual():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for p, runs in ((problem([8192, 2048]), True), (_norm_problems.problem([8192, 2048], rms=False), False)):
        drawn = [SPACE.suggest(study.ask(), p) for _ in range(80)]
        assert "tiles_early" in {c["kernel"] for c in drawn}
        runnable = {c["kernel"] for c in drawn if SPACE.rejects(c, p) is None}
        assert ("tiles_early" in runnable) is runs
        assert any(c["BLOCK_M"] > 1 for c in drawn if c["kernel"] == "tiles_early")


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS)
def test_the_rows_stored_before_tiles_early_serve_the_tiles_row_first(spec):
    before_tiles, before_early, _ = spec.extends
    assert before_early.source_hash == "bb7d9dd141919d30", "the hash the shipped tiles rows were searched under"
    assert before_tiles.source_hash == "b9000467cf51e6be"
    assert spec.source_hash not in (before_tiles.source_hash, before_early.source_hash)
    assert spec.is_current(before_early.source_hash, one_read_config("tiles", BLOCK_N=16))
    assert not spec.is_current(before_early.source_hash, one_read_config("tiles_early", BLOCK_N=16))
