"""flash_attn_backward searches a Gluon engine (the Hopper backward of hopper_backward.py) beside its Triton kernels,
per bucket: its configs are valid only where the Gluon kernel runs (a Hopper GPU, not the interpreter; half inputs,
head dims 64 and 128, tiles that fit its shared memory, its register split), each engine fixes the other's
parameters, a search on Hopper starts from the probe's fastest configs, and the rows tuned before the engine existed
stay current and are served completed with engine="triton"."""

import optuna
import pytest
import torch
from stored_rows import shipped_rows

import autotune
from autotune import gpu
from autotune.db import ConfigStore
from autotune.engine.plan import SearchOptions
from autotune.engine.search import search
from autotune.kernels.attention import flash_attn_backward as fab
from autotune.kernels.attention import problems as problems_
from autotune.search_spaces import flash_attn as space_
from autotune.search_spaces import flash_attn_backward_gluon as engine
from autotune.search_spaces import flash_attn_gluon as forward_engine
from autotune.search_spaces.flash_attn import BACKWARD_SPACE

HALF_128 = {**problems_.problem(4, 16, 4096, 128), "dtype": "bf16"}
HALF_64 = {**problems_.problem(4, 32, 4096, 64), "dtype": "bf16"}
SEPARATE = {
    **engine.GLUON_FIXED,
    "engine": "gluon",
    "BLOCK_M": 64,
    "BLOCK_N": 64,
    "num_stages": 2,
    "NUM_CONSUMERS": 2,
    "CONSUMER_REGISTERS": 240,
    "dq": "separate",
    "ds": "rounded",
    "dv": "rounded",
    "delta": "recomputed",
    "EARLY_DP": False,
    "PINGPONG": False,
}
"""The probe's fastest config at head dim 128 (benchmarks/results/H100/hopper-attention-backward-probe.md), with the
delta it recomputes (space_.OUTPUT_DELTA_FAILED)."""


@pytest.fixture
def hopper(monkeypatch):
    """This machine as the Gluon kernels need it (a Hopper GPU with Triton 3.6's Gluon): the constraints alone."""
    monkeypatch.setattr(forward_engine, "unavailable", lambda: None)


def test_the_gluon_engine_is_rejected_here_naming_why():
    assert gpu.interpreter_active()
    reason = BACKWARD_SPACE.rejects(BACKWARD_SPACE.validate(SEPARATE), HALF_128)
    assert reason == "engine=gluon: the Triton interpreter does not run Gluon"
    assert engine.starts(HALF_128) == [] and BACKWARD_SPACE.starts(HALF_128) == []
    assert not engine.runs_on(HALF_128)


@pytest.mark.parametrize(
    "overrides, problem, reason",
    [
        ({}, HALF_128, None),
        ({"dq": "combined", "ds": "split", "EARLY_DP": True}, HALF_128, None),
        ({"BLOCK_M": 128, "dq": "atomic"}, HALF_64, None),
        ({"BLOCK_M": 128, "dq": "combined"}, HALF_64, "engine=gluon: DQ='combined' with 128-query blocks is refused"),
        ({"PINGPONG": True}, HALF_128, None),
        ({"PINGPONG": True, "dq": "combined", "EARLY_DP": True}, HALF_128, None),
        (
            {"PINGPONG": True, "NUM_CONSUMERS": 1, "CONSUMER_REGISTERS": 232},
            HALF_128,
            "engine=gluon: PINGPONG takes turns between two consumers",
        ),
        ({}, {**HALF_128, "dtype": "fp32"}, "engine=gluon: it takes bf16 and fp16 inputs, not fp32"),
        ({}, {**HALF_128, "head_dim": 96}, "engine=gluon: head dim 96 is not one of (64, 128)"),
        ({"NUM_CONSUMERS": 1, "CONSUMER_REGISTERS": 232, "dq": "combined"}, HALF_128, "engine=gluon: DQ='combined'"),
        ({"CONSUMER_REGISTERS": 232}, HALF_128, "engine=gluon: CONSUMER_REGISTERS=232 with 2 consumer(s)"),
        ({"BLOCK_M": 128, "dq": "atomic"}, HALF_128, "engine=gluon: the tiles take"),
        ({"num_stages": 4, "ds": "split"}, HALF_128, "engine=gluon: the tiles take"),
        ({"BLOCK_N": 128}, HALF_128, "engine=gluon: config['BLOCK_N'] must be one of (64,)"),
        ({"BLOCK_M": 16}, HALF_128, "engine=gluon: config['BLOCK_M'] must be one of (64, 128)"),
        ({"num_stages": 5}, HALF_128, "engine=gluon: config['NUM_STAGES'] must be one of (1, 2, 3, 4)"),
        (
            {"BLOCK_M": 128, "NUM_CONSUMERS": 1, "CONSUMER_REGISTERS": 232},
            {**HALF_64, "nq": 50, "nk": 60},
            "engine=gluon: BLOCK_M exceeds",
        ),
        ({}, {**HALF_64, "nq": 50, "nk": 60}, "engine=gluon: BLOCK_N x NUM_CONSUMERS exceeds Nq and Nk"),
        ({"num_warps": 8}, HALF_128, "engine=gluon fixes num_warps=4"),
        ({"delta": "output"}, HALF_128, "delta=output is refused for bf16 inputs"),
        ({"delta": "output"}, {**HALF_64, "dtype": "fp16"}, "delta=output is refused for fp16 inputs"),
    ],
)
def test_on_hopper_gluon_configs_run_where_the_kernel_does(hopper, overrides, problem, reason):
    found = BACKWARD_SPACE.rejects(BACKWARD_SPACE.validate({**SEPARATE, **overrides}), problem)
    assert (found is None) if reason is None else (found or "").startswith(reason), found


def test_triton_configs_fix_the_gluon_parameters_and_leave_combined_to_it(hopper):
    triton = dict(BACKWARD_SPACE.default)
    assert {k: triton[k] for k in engine.TRITON} == engine.TRITON
    problem = {**problems_.problem(1, 2, 40, 32), "dtype": "fp32"}
    assert BACKWARD_SPACE.rejects(triton, problem) is None
    assert BACKWARD_SPACE.rejects({**triton, "NUM_CONSUMERS": 2}, problem).startswith("engine=triton fixes")
    assert BACKWARD_SPACE.rejects({**triton, "EARLY_DP": True}, problem).startswith("engine=triton fixes")
    assert BACKWARD_SPACE.rejects({**triton, "PINGPONG": True}, problem).startswith("engine=triton fixes")
    assert BACKWARD_SPACE.rejects({**triton, "dq": "combined"}, HALF_128).startswith("dq=combined")


@pytest.mark.parametrize(
    "problem, best",
    [
        (HALF_128, {"BLOCK_M": 64, "dq": "separate"}),
        (HALF_64, {"BLOCK_M": 64, "dq": "atomic"}),
        # fp16: the same, then the first again with dS split (FP16_DS)
        ({**HALF_128, "dtype": "fp16", "causal": True, "batch": 16, "nq": 1024, "nk": 1024}, {"dq": "separate"}),
    ],
)
def test_on_hopper_a_search_draws_both_engines_and_starts_from_the_probes_best(hopper, problem, best):
    starts = BACKWARD_SPACE.starts(problem)
    fp16 = problem["dtype"] == "fp16"
    assert len(starts) == 2 + fp16 and starts[0] == BACKWARD_SPACE.validate({**SEPARATE, **best})
    assert all(BACKWARD_SPACE.rejects(s, problem) is None for s in starts)
    assert [s["ds"] for s in starts] == ["rounded", "rounded"] + ["split"] * fp16
    assert not fp16 or starts[2] == {**starts[0], "ds": "split"}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = [BACKWARD_SPACE.suggest(study.ask(), problem) for _ in range(400)]
    assert {c["engine"] for c in drawn} == {"triton", "gluon"}
    valid_gluon = [c for c in drawn if c["engine"] == "gluon" and BACKWARD_SPACE.rejects(c, problem) is None]
    assert valid_gluon and all({k: c[k] for k in engine.GLUON_FIXED} == engine.GLUON_FIXED for c in valid_gluon)
    assert {c["dq"] for c in valid_gluon} == {"separate", "atomic", "combined"}
    assert {c["delta"] for c in drawn} == {"output", "recomputed"}  # drawn, and refused for half inputs:
    assert {c["delta"] for c in drawn if BACKWARD_SPACE.rejects(c, problem) is None} == {"recomputed"}
    assert {c["PINGPONG"] for c in valid_gluon} == {False, True}  # drawn where two consumers take turns, only there
    assert all(c["NUM_CONSUMERS"] == 2 for c in drawn if c["engine"] == "gluon" and c["PINGPONG"])


def test_a_gluon_configs_resources_are_its_kernels(hopper):
    resources = space_.backward_resources(BACKWARD_SPACE.validate(SEPARATE), HALF_128)
    assert resources.tma
    # K and V of two consumers, a 2-stage Q/dO ring, P^T and dS^T per consumer (no dQ tile: separate), barriers.
    assert resources.shared_memory == (2 * 2 * 64 * 128 + 2 * 2 * 64 * 128 + 2 * 64 * 64 * 2) * 2 + 1024


def test_a_search_on_the_cpu_tries_the_triton_kernels_alone(tmp_path):
    problem = problems_.problem(1, 2, 20, 16, causal=True)
    with ConfigStore(str(tmp_path / "search.sqlite")) as store:
        result = search(
            fab.SPEC, problem, torch.float16, SearchOptions(trials=2, examples=2, final_examples=2), store=store
        )
    assert result.best_config is not None and result.best_config["engine"] == "triton"
    assert result.trials and all(t.config["engine"] == "triton" for t in result.trials)
    assert all(t.config["dq"] != "combined" for t in result.trials)


def test_every_shipped_row_is_current_and_those_tuned_before_the_engine_are_served_completed():
    spec = autotune.get("flash_attn_backward")
    rows = shipped_rows("flash_attn_backward")
    before_engine, before_dv = spec.extends[0].source_hash, spec.extends[1].source_hash
    earlier = [r for r in rows if r.source_hash == before_engine]
    assert before_engine == "ccd6b823f74511d7", "the hash the rows tuned before the Gluon engine were tuned under"
    assert before_dv == "2af00fe82ba116dd", "the hash of the rows tuned with the engine, before the dV pass"
    assert len(rows) >= 80 and {r.source_hash for r in rows} <= {before_engine, before_dv, spec.source_hash}
    assert earlier and all(spec.row_is_current(r) for r in rows)
    # A bucket searched with the engine serves its own row; its earlier row stays, the Triton fallback.
    searched = {(r.gpu, r.dtype, r.bucket) for r in rows if r.source_hash != before_engine}
    assert len(spec.current_rows(rows)) == len(rows) - sum((r.gpu, r.dtype, r.bucket) in searched for r in earlier)
    for r in earlier:
        assert "engine" not in r.config
        assert spec.space.validate(spec.current_config(r)) == {**r.config, **engine.TRITON, "dv": "rounded"}
    for r in rows:
        if r.source_hash != before_engine:  # searched with the engine: every parameter it had stored; dv, rounded
            assert spec.space.validate(spec.current_config(r)) == {"dv": "rounded", **r.config}
