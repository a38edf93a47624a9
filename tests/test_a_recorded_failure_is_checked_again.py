"""A row that `db verify` flagged keeps its failing problem and the seed of the inputs it failed on. Checking
that bucket again (`db verify --flagged`, a new search, or the workers of a shared study) runs that problem
on that seed first, so a failure that depends on the inputs is not cleared by a fresh seed that happens to
draw passing ones."""

import json

import optuna
import pytest
import torch
from click.testing import CliRunner
from stored_rows import store_best
from wrong_kernels import INPUT_BUG_ADD

import autotune.kernels.vector_add.add as vector_add
from autotune.cli import main
from autotune.db import ConfigStore
from autotune.engine.distributed import conclude_shared, create_shared_study
from autotune.engine.plan import SearchOptions, open_storage, plan_of
from autotune.engine.search import search
from autotune.engine.worker import run_worker
from autotune.gate.verify import check_problem, verify
from autotune.measure.reverify import reverify_rows

WRONG = {"BLOCK_SIZE": 2048, "num_warps": 4, "num_stages": 1}  # wrong on some inputs only
RIGHT = {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1}
PROBLEM = INPUT_BUG_ADD.problem_for(vector_add.parse_shape("3000"), torch.float32)
BUCKET = INPUT_BUG_ADD.bucket(PROBLEM)
OTHER_BUCKET = INPUT_BUG_ADD.bucket(vector_add.parse_shape("300"))


@pytest.fixture(scope="module")
def seeds() -> tuple[int, int]:
    """(a seed on which WRONG fails on PROBLEM, a seed on which all that `db verify` checks passes)."""
    failing = next(s for s in range(300) if check_problem(INPUT_BUG_ADD, WRONG, PROBLEM, torch.float32, seed=s))
    passing = next(
        s
        for s in range(300)
        if verify(
            INPUT_BUG_ADD, WRONG, torch.float32, examples=8, seed=s, extra_problems=INPUT_BUG_ADD.edges_for(PROBLEM)
        ).passed
    )
    return failing, passing


def _flag_wrong_row(db_path, failing_seed: int) -> None:
    store_best(db_path, INPUT_BUG_ADD, BUCKET, WRONG, problem=PROBLEM)
    with ConfigStore(str(db_path)) as store:
        assert reverify_rows(store, kernels=[INPUT_BUG_ADD], examples=4, seed=failing_seed).rows[0].result == "FAIL"


def _row(db_path, bucket: str = BUCKET):
    with ConfigStore(str(db_path)) as store:
        return next(r for r in store.best_rows(kernel=INPUT_BUG_ADD.name) if r.bucket == bucket)


def test_a_flagged_row_keeps_its_failing_problem_and_seed(user_db, seeds):
    failing, _ = seeds
    _flag_wrong_row(user_db, failing)
    problem, seed = _row(user_db).recorded_failure
    assert seed == failing
    assert (
        check_problem(INPUT_BUG_ADD, WRONG, INPUT_BUG_ADD.problem_for(problem, torch.float32), torch.float32, seed=seed)
        is not None
    )


def test_db_verify_flagged_checks_the_recorded_failure_on_its_seed_so_a_lucky_seed_does_not_clear_it(user_db, seeds):
    failing, passing = seeds
    _flag_wrong_row(user_db, failing)
    store_best(user_db, INPUT_BUG_ADD, OTHER_BUCKET, RIGHT, problem=vector_add.parse_shape("300"))

    run = CliRunner().invoke(
        main,
        [
            "db",
            "verify",
            "--kernel",
            "wrong_kernels:INPUT_BUG_ADD",
            "--flagged",
            "--examples",
            "8",
            "--seed",
            str(passing),
            "--format",
            "json",
        ],
    )
    assert run.exit_code == 1, run.output
    assert [(r["bucket"], r["result"]) for r in json.loads(run.stdout)] == [(BUCKET, "FAIL")]  # the flagged row only
    row = _row(user_db)
    assert row.flagged and row.verify_seed == passing  # this run's outcome, recorded
    assert row.recorded_failure[1] == failing  # still the seed its inputs fail on
    assert _row(user_db, OTHER_BUCKET).verified_at is None  # --flagged left the unverified row alone


def test_a_search_checks_every_config_on_the_buckets_recorded_failures(user_db, seeds):
    failing, passing = seeds
    unaware = search(
        INPUT_BUG_ADD,
        PROBLEM,
        torch.float32,
        SearchOptions(trials=2, seed=passing, examples=4, final_examples=8, warm_start=[WRONG], isolate=False),
    )
    assert {json.dumps(t.config, sort_keys=True): t.outcome for t in unaware.trials}[
        json.dumps(WRONG, sort_keys=True)
    ] == "ok"

    _flag_wrong_row(user_db, failing)
    recorded_problem, _ = _row(user_db).recorded_failure
    with ConfigStore(str(user_db)) as store:
        result = search(
            INPUT_BUG_ADD,
            PROBLEM,
            torch.float32,
            SearchOptions(trials=2, seed=passing, examples=4, final_examples=8, warm_start=[WRONG], isolate=False),
            store=store,
        )
    wrong = next(t for t in result.trials if t.config == WRONG)
    assert wrong.outcome == "incorrect" and wrong.example == recorded_problem
    assert result.best_config is not None and result.best_config != WRONG
    row = _row(user_db)
    assert row.config == result.best_config and not row.flagged  # the flagged row replaced


def test_a_search_does_not_take_back_a_config_flagged_for_its_bucket(user_db):
    """Even where no failing problem was kept (none of the drawn problems applied), the flagged config
    is not chosen: the store would keep the flagged row rather than take it back."""
    default = dict(INPUT_BUG_ADD.space.default)
    store_best(user_db, INPUT_BUG_ADD, BUCKET, default, problem=PROBLEM)
    with ConfigStore(str(user_db)) as store:
        store.record_verification(
            _row(user_db),
            passed=False,
            seed=1,
            examples=0,
            failure_json=json.dumps(
                {"problem": None, "kind": "untested", "reason": "the config applies to none of the problems drawn"}
            ),
        )
        assert _row(user_db).recorded_failure is None
        result = search(
            INPUT_BUG_ADD,
            PROBLEM,
            torch.float32,
            SearchOptions(trials=1, seed=0, examples=2, final_examples=4, isolate=False),
            store=store,
        )
    assert [t.config for t in result.trials] == [default] and result.trials[0].outcome == "ok"
    assert result.best_config is None


def test_workers_of_a_shared_study_check_the_buckets_recorded_failures_too(user_db, tmp_path, seeds):
    failing, passing = seeds
    _flag_wrong_row(user_db, failing)
    recorded = _row(user_db).recorded_failure
    storage = str(tmp_path / "shared.journal")
    with ConfigStore(str(user_db)) as store:
        name = create_shared_study(
            INPUT_BUG_ADD,
            PROBLEM,
            torch.float32,
            storage,
            SearchOptions(trials=2, seed=passing, examples=4, warm_start=[WRONG]),
            store=store,
        )
        assert plan_of(optuna.load_study(study_name=name, storage=open_storage(storage))).failures() == [recorded]
        run_worker(storage, [name], index=0)
        result = conclude_shared(storage, name, store=store, final_examples=8)
    wrong = next(t for t in result.trials if t.config == WRONG)
    assert wrong.outcome == "incorrect" and wrong.example == recorded[0]
    assert result.best_config not in (None, WRONG) and _row(user_db).config == result.best_config
