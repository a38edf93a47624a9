import dataclasses
import json
import sqlite3

import pytest
import torch
from wrong_kernels import STATIC_FAIL_ADD, TAIL_BUG_ADD

import autotune.kernels.vector_add.add as vector_add
from autotune import gpu, runtime
from autotune.db import BestRow, ConfigStore
from autotune.engine.evaluate import Evaluator
from autotune.engine.plan import SearchOptions
from autotune.engine.search import search
from autotune.gate.verify import draw_problems, verify
from autotune.kernels import add
from autotune.space import Param, SearchSpace

PROBLEM = vector_add.parse_shape("5000")


def test_search_finishes_and_stores_the_best_verified_row(user_db):
    with ConfigStore(str(user_db)) as store:
        result = search(
            vector_add.SPEC, PROBLEM, torch.float32, SearchOptions(trials=8, examples=5, final_examples=10), store=store
        )
        rows = store.best_rows(kernel="vector_add")
        trials = store.trials(kernel="vector_add")
    assert result.stored and result.best_config is not None
    assert len(rows) == 1
    row = rows[0]
    assert row.gpu == gpu.CPU_INTERPRETER  # interpreter rows never mix with GPU rows
    assert row.bucket == "n=8192" and row.config == result.best_config
    assert row.time_ms == result.best_ms and row.default_time_ms and row.baseline_time_ms
    assert row.examples_verified >= 10 and row.source_hash == vector_add.SPEC.source_hash
    assert len(trials) == 8 and {t.outcome for t in trials} <= {"ok", "invalid"}
    # The default config is the warm start: trial 0.
    assert json.loads(trials[0].config_json) == vector_add.SPACE.default


def _small_space(spec, blocks):
    space = SearchSpace(
        (Param("BLOCK_SIZE", blocks), Param("num_warps", (4,)), Param("num_stages", (1,))),
        default={"BLOCK_SIZE": blocks[0], "num_warps": 4, "num_stages": 1},
    )
    return dataclasses.replace(spec, space=space, _hash=[])


def test_wrong_configs_are_recorded_as_incorrect_with_their_example_and_never_win(user_db):
    spec = _small_space(TAIL_BUG_ADD, (1024, 2048, 4096))
    with ConfigStore(str(user_db)) as store:
        result = search(
            spec,
            PROBLEM,
            torch.float32,
            SearchOptions(trials=10, sampler="grid", examples=10, final_examples=10),
            store=store,
        )
        stored_trials = store.trials(kernel="tail_bug_add")
    by_block = {t.config["BLOCK_SIZE"]: t for t in result.trials}
    assert by_block[1024].outcome == "ok"
    for block in (2048, 4096):
        assert by_block[block].outcome == "incorrect" and by_block[block].example is not None
    assert result.best_config["BLOCK_SIZE"] == 1024
    stored_outcomes = {t.config["BLOCK_SIZE"]: t.outcome for t in stored_trials}
    assert stored_outcomes == {1024: "ok", 2048: "incorrect", 4096: "incorrect"}
    assert all(t.failing_example_json for t in stored_trials if t.outcome == "incorrect")


def test_configs_that_fail_to_build_are_recorded_and_the_search_goes_on(user_db):
    spec = _small_space(STATIC_FAIL_ADD, (512, 256, 1024))
    result = search(
        spec, PROBLEM, torch.float32, SearchOptions(trials=10, sampler="grid", examples=3, final_examples=3)
    )
    failed = [t for t in result.trials if t.config["BLOCK_SIZE"] == 256]
    assert failed and all(t.outcome in ("compile_error", "error") for t in failed)
    assert "BLOCK_SIZE=256" in failed[0].reason
    assert result.best_config is not None and result.best_config["BLOCK_SIZE"] != 256
    assert {t.config["BLOCK_SIZE"] for t in result.trials if t.outcome == "ok"} == {512, 1024}


def test_search_refuses_to_measure_another_gpu():
    with pytest.raises(gpu.GPUMismatchError, match="H100"):
        search(vector_add.SPEC, PROBLEM, torch.float32, SearchOptions(gpu_name="H100", trials=1))


def _store_row(path, bucket="n=8192", config=None, source_hash=None, time_ms=1.0, dtype="fp32"):
    with ConfigStore(str(path)) as store:
        store.record_best(
            BestRow(
                kernel="vector_add",
                source_hash=source_hash or vector_add.SPEC.source_hash,
                gpu=gpu.current_gpu().name,
                device_name="test",
                dtype=dtype,
                bucket=bucket,
                config_json=config if isinstance(config, str) else json.dumps(config),
                problem_json="{}",
                time_ms=time_ms,
                examples_verified=1,
                triton_version="x",
                torch_version="y",
            )
        )


def _launched_config(x, y):
    with runtime.record_launches() as launches:
        out = add(x, y)
    assert torch.equal(out, x + y)
    assert len(launches) == 1
    return launches[0][1]


def test_runtime_launches_exactly_the_stored_config(user_db):
    stored = {"BLOCK_SIZE": 512, "num_warps": 2, "num_stages": 3}
    _store_row(user_db, config=stored)
    x, y = torch.randn(5000), torch.randn(5000)
    assert _launched_config(x, y) == stored
    assert runtime.tuned(vector_add.SPEC).choice(torch.float32, "n=8192").source == "exact"


def test_runtime_takes_the_nearest_bucket_then_the_default(user_db):
    stored = {"BLOCK_SIZE": 256, "num_warps": 1, "num_stages": 1}
    _store_row(user_db, bucket="n=8192", config=stored)
    assert _launched_config(torch.randn(20000), torch.randn(20000)) == stored  # n=32768: nearest is n=8192
    half = torch.randn(20000, dtype=torch.float16)
    assert _launched_config(half, half) == vector_add.SPACE.default  # no fp16 rows at all


@pytest.mark.parametrize(
    "config, source_hash, why",
    [
        ('{"BLOCK_SIZE": 512, "num_warps"', None, "not valid JSON"),
        ({"BLOCK_SIZE": 512, "num_warps": 2, "num_stages": 3, "EVIL": 1}, None, "unknown"),
        ({"BLOCK_SIZE": 3, "num_warps": 2, "num_stages": 3}, None, "BLOCK_SIZE=3"),
        (None, "0123456789abcdef", "another kernel source"),
    ],
)
def test_corrupt_or_foreign_rows_are_ignored_with_one_warning(user_db, config, source_hash, why):
    _store_row(user_db, config={"BLOCK_SIZE": 512, "num_warps": 2, "num_stages": 3}, source_hash=source_hash)
    if config is not None:  # damage the row the way another program or a bad disk could
        with sqlite3.connect(user_db) as con:
            con.execute(
                "UPDATE best_configs SET config = ?", (config if isinstance(config, str) else json.dumps(config),)
            )
    x = torch.randn(5000)
    with pytest.warns(runtime.StoredConfigWarning, match=why) as caught:
        assert _launched_config(x, x) == vector_add.SPACE.default
        _launched_config(x, x)  # cached: no second warning
    assert len(caught) == 1


@pytest.mark.parametrize(
    "args, error, message",
    [
        (
            (torch.ones(4, dtype=torch.int32), torch.ones(4, dtype=torch.int32)),
            TypeError,
            "x must have a floating dtype",
        ),
        ((torch.ones(4), torch.ones(5)), ValueError, "one shape"),
        ((torch.ones(4), torch.ones(4, dtype=torch.float16)), TypeError, "one dtype"),
        ((torch.ones(4), torch.ones(4, device="meta")), ValueError, "y must be on"),
        ((torch.ones(4), [1.0, 2.0]), TypeError, "y must be a torch.Tensor"),
    ],
)
def test_bad_inputs_get_clear_errors_before_any_launch(args, error, message):
    with runtime.record_launches() as launches, pytest.raises(error, match=message):
        add(*args)
    assert launches == []


def test_add_handles_any_rank_noncontiguous_and_empty():
    x = torch.randn(33, 17, 5).transpose(0, 2)
    y = torch.randn(5, 17, 33)
    assert torch.equal(add(x, y), x + y)
    e = torch.empty(3, 0)
    assert add(e, e).shape == (3, 0)


def test_compiling_ahead_in_worker_processes_keeps_the_budget_every_trial_and_every_verdict(user_db):
    with ConfigStore(str(user_db)) as store:
        result = search(
            TAIL_BUG_ADD,
            PROBLEM,
            torch.float32,
            SearchOptions(trials=8, examples=5, final_examples=5),
            store=store,
            compile_workers=2,
        )
        stored = store.trials(kernel="tail_bug_add")
    assert result.evaluations == 8 and result.compiled_ahead >= 1
    assert sorted(t.number for t in result.trials) == list(range(len(result.trials)))  # each trial once, none lost
    assert len(stored) == len(result.trials)
    assert json.loads(stored[0].config_json) == vector_add.SPACE.default
    for t in result.trials:
        if t.config["BLOCK_SIZE"] in (2048, 4096) and t.outcome != "invalid":  # wrong on 5000 elements
            assert t.outcome == "incorrect"
    assert result.stored and result.best_config["BLOCK_SIZE"] not in (2048, 4096)


def test_the_gate_s_draws_are_known_before_the_first_trial_so_the_first_batch_compiles_them_ahead():
    # Before, they were learnt from the first config that passed: every config of the first batch compiled
    # its draws one after another in the measuring process (the attention backward finished no trial so).
    evaluator = Evaluator(TAIL_BUG_ADD, PROBLEM, torch.float32, examples=6, seed=1, max_numel=1 << 14)
    drawn = evaluator.problems_run[1 + len(evaluator.edges) :]
    assert len(drawn) == 6
    assert drawn == draw_problems(
        TAIL_BUG_ADD, vector_add.SPACE.default, torch.float32, examples=6, seed=1, max_numel=1 << 14
    )
    gate = verify(
        TAIL_BUG_ADD,
        vector_add.SPACE.default,
        torch.float32,
        examples=6,
        seed=1,
        max_numel=1 << 14,
        extra_problems=evaluator.edges,
    )  # the check the evaluator runs on a trial's config
    assert gate.passed and [p for p in gate.problems if p not in evaluator.edges] == drawn


EVEN_SIZES_FOR_LARGE_BLOCKS = dataclasses.replace(
    vector_add.SPEC,
    name="even_sizes_add",
    _hash=[],
    space=dataclasses.replace(
        vector_add.SPACE,
        constraints=(
            *vector_add.SPACE.constraints,
            lambda c, p: "odd size" if c["BLOCK_SIZE"] >= 4096 and p["shape"][0] % 2 else None,
        ),
    ),
)


def test_each_config_compiles_ahead_the_problems_its_own_gate_draws():
    # A config whose constraints reject some draws is checked on others than the default's; compiling the
    # default's ahead left its own (matmul's large tiles: some 20 specializations, 25 s a trial on an H100)
    # to compile one after another in the measuring process.
    evaluator = Evaluator(EVEN_SIZES_FOR_LARGE_BLOCKS, PROBLEM, torch.float32, examples=6, seed=1, max_numel=1 << 14)
    large = {"BLOCK_SIZE": 4096, "num_warps": 4, "num_stages": 2}
    drawn = evaluator.problems_for(large)[1 + len(evaluator.edges) :]
    gate = verify(
        EVEN_SIZES_FOR_LARGE_BLOCKS,
        large,
        torch.float32,
        examples=6,
        seed=1,
        max_numel=1 << 14,
        extra_problems=evaluator.edges,
    )  # the check the evaluator runs on a trial's config
    assert gate.passed and drawn == [p for p in gate.problems if p not in evaluator.edges]
    assert len(drawn) == 6 and all(p["shape"][0] % 2 == 0 for p in drawn)
    assert any(p["shape"][0] % 2 for p in evaluator.problems_run[1 + len(evaluator.edges) :])  # the default's differ
    assert evaluator.problems_for(vector_add.SPACE.default) == evaluator.problems_run
