"""flash_attn's forward searches a Gluon engine (the Hopper kernel of hopper_forward.py) beside its Triton kernels,
per bucket: its configs are valid only where the Gluon kernel runs (a Hopper GPU, not the interpreter; half inputs,
head dims 64 and 128, its own config facts), each engine fixes the other's parameters, and the rows tuned before
the engine existed stay current and are served completed with engine="triton"."""

import json

import optuna
import pytest
import torch
from stored_rows import shipped_rows

import autotune
from autotune import gpu, runtime
from autotune.db import BestRow, ConfigStore
from autotune.engine.plan import SearchOptions
from autotune.engine.search import search
from autotune.kernels.attention import flash_attn as fa
from autotune.kernels.attention import problems as problems_
from autotune.search_spaces import flash_attn as space_
from autotune.search_spaces import flash_attn_gluon as gluon
from autotune.search_spaces.flash_attn import FORWARD_SPACE

HALF_128 = {**problems_.problem(2, 16, 4096, 128), "dtype": "bf16"}
FA3 = {
    **gluon.GLUON_FIXED,
    "engine": "gluon",
    "BLOCK_M": 64,
    "BLOCK_N": 128,
    "num_stages": 2,
    "NUM_CONSUMERS": 2,
    "PINGPONG": True,
    "CONSUMER_REGISTERS": 240,
}


@pytest.fixture
def hopper(monkeypatch):
    """This machine as the Gluon kernel needs it (a Hopper GPU with Triton 3.6's Gluon): the constraints alone."""
    monkeypatch.setattr(gluon, "unavailable", lambda: None)


def test_the_gluon_engine_is_rejected_here_naming_why():
    assert gpu.interpreter_active()
    reason = FORWARD_SPACE.rejects(FORWARD_SPACE.validate(FA3), HALF_128)
    assert reason == "engine=gluon: the Triton interpreter does not run Gluon"
    assert gluon.starts(HALF_128) == [] and not gluon.runs_on(HALF_128)
    assert space_._forward_choices(HALF_128)["engine"] == ["triton"]


def test_without_a_gpu_the_gluon_engine_is_rejected(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # a search on a CPU without the interpreter: no GPU to run Gluon
    gluon.unavailable.cache_clear()
    try:
        assert gluon.unavailable() == "no GPU: the Gluon kernel needs a Hopper GPU (sm_90)"
        assert FORWARD_SPACE.rejects(FA3, HALF_128) == f"engine=gluon: {gluon.unavailable()}"
    finally:
        gluon.unavailable.cache_clear()


@pytest.mark.parametrize(
    "overrides, problem, reason",
    [
        ({}, HALF_128, None),
        ({}, {**HALF_128, "dtype": "fp32"}, "engine=gluon: it takes bf16 and fp16 inputs, not fp32"),
        ({}, {**HALF_128, "head_dim": 96}, "engine=gluon: head dim 96 is not one of (64, 128)"),
        ({"NUM_CONSUMERS": 1}, HALF_128, "engine=gluon: PINGPONG takes turns between two consumers"),
        ({"PINGPONG": False, "CONSUMER_REGISTERS": 232}, HALF_128, "engine=gluon: CONSUMER_REGISTERS=232 with 2"),
        ({"BLOCK_N": 256, "num_stages": 4}, HALF_128, "engine=gluon: the tiles take"),
        ({"BLOCK_M": 16}, HALF_128, "engine=gluon: config['BLOCK_M'] must be one of (64, 128)"),
        ({"BLOCK_M": 128}, {**HALF_128, "nq": 100}, "engine=gluon: BLOCK_M x NUM_CONSUMERS exceeds the queries"),
        ({"num_warps": 8}, HALF_128, "engine=gluon fixes num_warps=4"),
        ({"KV_SPLITS": 2}, HALF_128, "engine=gluon fixes"),
    ],
)
def test_on_hopper_gluon_configs_run_where_the_kernel_does(hopper, overrides, problem, reason):
    found = FORWARD_SPACE.rejects(FORWARD_SPACE.validate({**FA3, **overrides}), problem)
    assert (found is None) if reason is None else found.startswith(reason), found


def test_triton_configs_fix_the_gluon_parameters_to_their_earlier_values():
    triton = dict(FORWARD_SPACE.default)
    assert {k: triton[k] for k in gluon.TRITON} == gluon.TRITON
    problem = {**problems_.problem(1, 2, 40, 32), "dtype": "fp32"}
    assert FORWARD_SPACE.rejects(triton, problem) is None
    assert FORWARD_SPACE.rejects({**triton, "NUM_CONSUMERS": 2}, problem).startswith("engine=triton fixes")


def test_on_hopper_a_search_draws_both_engines_and_starts_from_the_probes_best(hopper):
    assert FORWARD_SPACE.starts(HALF_128)[-2:] == [FORWARD_SPACE.validate(FA3), gluon.starts(HALF_128)[1]]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = [FORWARD_SPACE.suggest(study.ask(), HALF_128) for _ in range(100)]
    engines = {c["engine"] for c in drawn}
    assert engines == {"triton", "gluon"}
    valid_gluon = [c for c in drawn if c["engine"] == "gluon" and FORWARD_SPACE.rejects(c, HALF_128) is None]
    assert valid_gluon and all({k: c[k] for k in gluon.GLUON_FIXED} == gluon.GLUON_FIXED for c in valid_gluon)
    assert space_.forward_resources(FA3, HALF_128).tma
    assert space_.forward_resources(FA3, HALF_128).shared_memory == (64 * 2 + 2 * 2 * 128) * 128 * 2 + 1024


def test_a_search_on_the_cpu_tries_the_triton_kernels_alone(tmp_path):
    problem = problems_.problem(1, 2, 40, 32, causal=True)
    with ConfigStore(str(tmp_path / "search.sqlite")) as store:
        result = search(
            fa.SPEC, problem, torch.float16, SearchOptions(trials=3, examples=2, final_examples=3), store=store
        )
    assert result.best_config is not None and result.best_config["engine"] == "triton"
    assert all(t.config["engine"] == "triton" for t in result.trials)


def test_every_shipped_row_is_current_and_those_tuned_before_the_engine_are_served_completed():
    spec = autotune.get("flash_attn")
    rows = shipped_rows("flash_attn")
    before_engine, before_merge = spec.extends  # the Triton kernels alone; then the engine, splits merged by a kernel
    earlier = [r for r in rows if r.source_hash == before_engine.source_hash]
    assert earlier and {r.source_hash for r in rows} <= {
        before_engine.source_hash,
        before_merge.source_hash,
        spec.source_hash,
    }
    assert all(spec.row_is_current(r) for r in rows)
    assert all("engine" not in r.config and "combine" not in r.config for r in earlier)
    for r in earlier:
        assert spec.space.validate(spec.current_config(r)) == {**r.config, **gluon.TRITON, "combine": "kernel"}
    for r in rows:
        if r.source_hash == before_merge.source_hash:
            assert "combine" not in r.config
            assert spec.space.validate(spec.current_config(r)) == {**r.config, "combine": "kernel"}
    for r in rows:
        if r.source_hash == spec.source_hash:  # searched with the engine: every parameter stored
            assert spec.space.validate(r.config) == r.config


def test_a_shipped_config_without_the_new_keys_is_served_and_launches_here(user_db):
    """A shipped row's config, stored under the earlier hash for a tiny bucket here: the runtime serves it
    completed, and it computes attention under the interpreter."""
    spec = autotune.get("flash_attn")
    earlier = [r for r in shipped_rows("flash_attn") if r.source_hash == spec.extends[0].source_hash]
    shipped = min(earlier, key=lambda r: (r.config["BLOCK_M"] * r.config["BLOCK_N"], r.id))
    q, k, v = (torch.randn(1, 2, 40, 32) for _ in range(3))
    problem = problems_.problem(1, 2, 40, 32)
    with ConfigStore(str(user_db)) as store:
        store.record_best(
            BestRow(
                **{f: getattr(shipped, f) for f in ("kernel", "source_hash", "config_json", "time_ms", "dtype")},
                gpu=gpu.current_gpu().name,
                device_name="test",
                bucket=spec.bucket(problem),
                problem_json=json.dumps(problem),
                examples_verified=20,
                triton_version="x",
                torch_version="y",
            )
        )
    q, k, v = (
        t.to(getattr(torch, {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[shipped.dtype]))
        for t in (q, k, v)
    )
    runtime.clear_cache()
    with runtime.record_launches() as launches:
        out = fa.flash_attn(q, k, v)
    assert launches == [("flash_attn", {**shipped.config, **gluon.TRITON, "combine": "kernel"})]
    expected = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    torch.testing.assert_close(out.double(), expected, atol=2e-2, rtol=2e-2)
