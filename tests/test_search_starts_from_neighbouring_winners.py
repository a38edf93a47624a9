"""A study first tries the default, its own bucket's stored best, the user's `--warm-start` configs, the config the
runtime serves its bucket now (the nearest bucket's row, or another GPU's: what the stored row will replace), that
bucket's winners under earlier kernel sources, then its space's own starts for the problem, then the winners of
neighbouring searches (this bucket in another dtype, the nearest buckets) that run on its problem, nearest first; each
is measured here like any trial. A cold search takes none of the databases' rows."""

import dataclasses
import json

import torch
from stored_rows import store_best

import autotune.kernels.fused_softmax.softmax as fused_softmax
from autotune import device_limits, gpu
from autotune.db import ConfigStore
from autotune.engine.plan import SearchOptions
from autotune.engine.search import search
from autotune.engine.warm_starts import EARLIER_SOURCE_WARM_STARTS, NEIGHBOUR_WARM_STARTS, served, warm_starts
from autotune.identity import RowKey
from autotune.runtime import fallback
from autotune.space import Config
from autotune.spec import DTYPE_NAMES

SPEC = fused_softmax.SPEC
PROBLEM = SPEC.parse_shape("8x100")  # bucket m=8,n=128


def single(rows: int, warps: int, block: int = 128) -> Config:
    return {"variant": "single", "BLOCK_SIZE": block, "ROWS_PER_PROGRAM": rows, "num_warps": warps, "num_stages": 1}


def online(block: int, warps: int) -> Config:
    return {"variant": "online", "BLOCK_SIZE": block, "ROWS_PER_PROGRAM": 1, "num_warps": warps, "num_stages": 2}


HALF_SAME_BUCKET = single(2, 1)
ROWS_16 = single(4, 2)
ROWS_64 = online(64, 2)
ROWS_1024 = online(32, 1)
WIDER_ROWS = single(1, 2, block=256)  # bucket n=256: a single block of 256 cannot run on rows of 100


def _store_neighbours(db) -> None:
    assert SPEC.bucket(PROBLEM) == "m=8,n=128"
    store_best(db, SPEC, "m=8,n=128", HALF_SAME_BUCKET, dtype="fp16")
    store_best(db, SPEC, "m=16,n=128", ROWS_16)
    store_best(db, SPEC, "m=8,n=256", WIDER_ROWS)
    store_best(db, SPEC, "m=64,n=128", ROWS_64)
    store_best(db, SPEC, "m=1024,n=128", ROWS_1024)
    store_best(db, SPEC, "m=32,n=128", single(8, 4), source_hash="another-kernel-source")


def test_neighbouring_winners_that_run_on_the_problem_come_nearest_first(user_db):
    _store_neighbours(user_db)
    with ConfigStore(str(user_db)) as store:
        starts = warm_starts(
            SPEC,
            store,
            RowKey(SPEC.name, SPEC.source_hash, gpu.current_gpu().name, DTYPE_NAMES[torch.float32], "m=8,n=128"),
            PROBLEM,
        )
        # ROWS_16, the nearest bucket's row, is what the runtime serves this bucket now: it comes before the rest.
        assert starts == [SPEC.space.default, ROWS_16, HALF_SAME_BUCKET, ROWS_64, ROWS_1024]
        assert NEIGHBOUR_WARM_STARTS == 3
        # This bucket's own row comes first among the stored ones, and is not repeated as a neighbour.
        store_best(user_db, SPEC, "m=8,n=128", ROWS_16)
        starts = warm_starts(
            SPEC,
            store,
            RowKey(SPEC.name, SPEC.source_hash, gpu.current_gpu().name, DTYPE_NAMES[torch.float32], "m=8,n=128"),
            PROBLEM,
        )
        assert starts == [SPEC.space.default, ROWS_16, HALF_SAME_BUCKET, ROWS_64, ROWS_1024]
        # Without the problem (what runs on it is unknown), only the default and the own row.
        assert warm_starts(
            SPEC,
            store,
            RowKey(SPEC.name, SPEC.source_hash, gpu.current_gpu().name, DTYPE_NAMES[torch.float32], "m=8,n=128"),
        ) == [SPEC.space.default, ROWS_16]


def test_a_search_measures_the_neighbours_first_and_stores_only_its_own_measurement(user_db):
    _store_neighbours(user_db)
    with ConfigStore(str(user_db)) as store:
        result = search(
            SPEC, PROBLEM, torch.float32, SearchOptions(trials=6, examples=3, final_examples=5), store=store
        )
        trials = store.trials(kernel="softmax")
        rows = {(r.dtype, r.bucket): r for r in store.best_rows(kernel="softmax")}
    first = sorted(trials, key=lambda t: t.number)[:4]
    assert [json.loads(t.config_json) for t in first] == [SPEC.space.default, ROWS_16, HALF_SAME_BUCKET, ROWS_64]
    assert all(t.outcome == "ok" and t.time_ms > 0 for t in first)  # each verified and timed here
    mine = rows[("fp32", "m=8,n=128")]
    assert mine.config == result.best_config and mine.time_ms == result.best_ms
    assert rows[("fp16", "m=8,n=128")].config == HALF_SAME_BUCKET  # the neighbours' rows are left as they were


def test_a_changed_kernel_starts_from_this_buckets_winners_under_its_earlier_sources(user_db):
    # Rows of an earlier source are never served, but their configs are a re-tune's best first guesses:
    # newest first, at most EARLIER_SOURCE_WARM_STARTS, only those still in the space and able to run the problem.
    store_best(user_db, SPEC, "m=8,n=128", single(1, 1), source_hash="source-1")
    store_best(user_db, SPEC, "m=8,n=128", ROWS_16, source_hash="source-2")
    store_best(user_db, SPEC, "m=8,n=128", ROWS_64, source_hash="source-3")
    store_best(user_db, SPEC, "m=8,n=128", WIDER_ROWS, source_hash="source-4")  # cannot run on rows of 100
    store_best(
        user_db, SPEC, "m=8,n=128", {"variant": "single", "BLOCK_SIZE": 128}, source_hash="source-5"
    )  # another space
    store_best(user_db, SPEC, "m=8,n=128", ROWS_1024, dtype="fp16", source_hash="source-6")  # another dtype
    assert EARLIER_SOURCE_WARM_STARTS == 2
    with ConfigStore(str(user_db)) as store:
        assert warm_starts(
            SPEC,
            store,
            RowKey(SPEC.name, SPEC.source_hash, gpu.current_gpu().name, DTYPE_NAMES[torch.float32], "m=8,n=128"),
            PROBLEM,
        ) == [SPEC.space.default, ROWS_64, ROWS_16]
        # This source's own row still comes first.
        store_best(user_db, SPEC, "m=8,n=128", HALF_SAME_BUCKET)
        assert warm_starts(
            SPEC,
            store,
            RowKey(SPEC.name, SPEC.source_hash, gpu.current_gpu().name, DTYPE_NAMES[torch.float32], "m=8,n=128"),
            PROBLEM,
        ) == [SPEC.space.default, HALF_SAME_BUCKET, ROWS_64, ROWS_16]


def test_a_spaces_own_starts_come_after_the_buckets_rows_and_before_the_neighbours(user_db):
    # Only those that belong to the space and run on the problem: a 256-wide block cannot hold rows of 100 here,
    # and a config of another space is not one.
    offered = [online(64, 1), WIDER_ROWS, {"variant": "single", "BLOCK_SIZE": 128}, online(64, 1)]
    spec = dataclasses.replace(SPEC, space=dataclasses.replace(SPEC.space, starts_fn=lambda problem: offered))
    assert spec.space.starts(PROBLEM) == [online(64, 1)]
    _store_neighbours(user_db)
    with ConfigStore(str(user_db)) as store:
        assert warm_starts(
            spec,
            store,
            RowKey(spec.name, spec.source_hash, gpu.current_gpu().name, DTYPE_NAMES[torch.float32], "m=8,n=128"),
            PROBLEM,
        ) == [SPEC.space.default, ROWS_16, online(64, 1), HALF_SAME_BUCKET, ROWS_64, ROWS_1024]  # ROWS_16: served
        store_best(user_db, SPEC, "m=8,n=128", ROWS_16)  # the bucket's own row comes before them
        assert warm_starts(
            spec,
            store,
            RowKey(spec.name, spec.source_hash, gpu.current_gpu().name, DTYPE_NAMES[torch.float32], "m=8,n=128"),
            PROBLEM,
        ) == [SPEC.space.default, ROWS_16, online(64, 1), HALF_SAME_BUCKET, ROWS_64, ROWS_1024]
        # Without the problem nothing tells which starts run on it.
        assert warm_starts(
            spec,
            store,
            RowKey(spec.name, spec.source_hash, gpu.current_gpu().name, DTYPE_NAMES[torch.float32], "m=8,n=128"),
        ) == [SPEC.space.default, ROWS_16]


def test_a_cold_search_starts_from_the_space_alone(user_db):
    _store_neighbours(user_db)
    store_best(user_db, SPEC, "m=8,n=128", ROWS_16)  # this bucket's own best: a warm search's second trial
    with ConfigStore(str(user_db)) as store:
        result = search(
            SPEC, PROBLEM, torch.float32, SearchOptions(trials=2, examples=2, final_examples=2, cold=True), store=store
        )
    firsts = [t.config for t in result.trials[:2]]
    assert firsts[0] == SPEC.space.default
    assert not {json.dumps(c, sort_keys=True) for c in firsts} & {
        json.dumps(c, sort_keys=True) for c in (ROWS_16, HALF_SAME_BUCKET, ROWS_64, ROWS_1024)
    }


def test_a_users_warm_starts_come_right_after_the_buckets_own_best(user_db):
    # Named by the user, so tried before any guess of ours: a short search (three trials here) still measures them.
    _store_neighbours(user_db)
    store_best(user_db, SPEC, "m=8,n=128", ROWS_16)
    given = [online(64, 1), ROWS_64]  # ROWS_64 is also a neighbour's winner: tried once, in the user's place
    with ConfigStore(str(user_db)) as store:
        result = search(
            SPEC,
            PROBLEM,
            torch.float32,
            SearchOptions(trials=3, examples=2, final_examples=2, warm_start=given),
            store=store,
        )
        assert [t.config for t in result.trials[:3]] == [SPEC.space.default, ROWS_16, online(64, 1)]
        key = RowKey(SPEC.name, SPEC.source_hash, gpu.current_gpu().name, DTYPE_NAMES[torch.float32], "m=8,n=128")
        starts = warm_starts(SPEC, store, key, PROBLEM, given)
    assert starts == [SPEC.space.default, ROWS_16, online(64, 1), ROWS_64, HALF_SAME_BUCKET, ROWS_1024]


def test_the_row_another_gpu_serves_here_is_measured_before_the_spaces_starts(user_db, monkeypatch):
    # An H200 tuned in no fp32 is served the H100's fp32 rows: its search measures that config first, so a short
    # search cannot store a row slower than what the H200 ran before it.
    spec = dataclasses.replace(SPEC, space=dataclasses.replace(SPEC.space, starts_fn=lambda problem: [online(64, 1)]))
    monkeypatch.setattr(fallback, "_warned", set())
    for name in ("H100", "H200"):
        info = gpu.GPUInfo(name, f"NVIDIA {name}", (9, 0), device_limits.MODELS[name].sms, None, None, {})
        monkeypatch.setattr(gpu, "current_gpu", lambda info=info: info)
        if name == "H100":
            store_best(user_db, SPEC, "m=8,n=128", ROWS_64)
    with ConfigStore(str(user_db)) as store:
        key = RowKey(spec.name, spec.source_hash, "H200", "fp32", "m=8,n=128")
        assert served(spec, key, PROBLEM) == ROWS_64
        assert warm_starts(spec, store, key, PROBLEM)[:3] == [SPEC.space.default, ROWS_64, online(64, 1)]
