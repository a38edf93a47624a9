"""When the gate itself breaks on a row (on the H100, flash_attn's baseline gave None for an output and
db verify died deep inside verify with "'NoneType' object is not iterable"), verify names the spec, the
function and the problem, and db verify reports that row as an error, leaves it as it was, and goes on
with the next row."""

import json

import pytest
import torch
from click.testing import CliRunner
from stored_rows import store_best
from wrong_kernels import EMPTY_BLIND_ADD, TAIL_BUG_ADD

import autotune.kernels.vector_add.add as vector_add
from autotune.cli import main
from autotune.db import ConfigStore
from autotune.gate.compare import InvalidOutputs, check_references
from autotune.gate.verify import check_problem, verify
from autotune.kernels.attention import problems as attn
from autotune.kernels.attention.flash_attn import SPEC as FLASH_ATTN
from autotune.kernels.attention.flash_attn_backward import SPEC as FLASH_ATTN_BACKWARD

EMPTY = vector_add.parse_shape("0")
RIGHT = {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1}


def test_a_baseline_that_returns_no_tensor_is_named_with_its_problem():
    with pytest.raises(InvalidOutputs, match=r"empty_blind_add's baseline returned a NoneType on .*\"shape\": \[0\]"):
        verify(EMPTY_BLIND_ADD, RIGHT, torch.float32, examples=2, extra_problems=[EMPTY])
    t = torch.zeros(3)
    with pytest.raises(InvalidOutputs, match=r"baseline returned a tuple of \(Tensor, NoneType\)"):
        check_references(FLASH_ATTN, {}, (t, None), (t, t))
    with pytest.raises(InvalidOutputs, match=r"disagree on \{\}: output shapes \[\(3,\)\] and \[\(3,\), \(3,\)\]"):
        check_references(FLASH_ATTN, {}, t, (t, t))


def test_db_verify_reports_the_row_whose_check_raises_and_goes_on_with_the_next(user_db):
    store_best(user_db, EMPTY_BLIND_ADD, "n=0", RIGHT, problem=EMPTY)  # its own problem breaks the baseline
    store_best(user_db, TAIL_BUG_ADD, "n=8192", RIGHT, problem=vector_add.parse_shape("5000"))
    kernels = ["--kernel", "wrong_kernels:EMPTY_BLIND_ADD", "--kernel", "wrong_kernels:TAIL_BUG_ADD"]

    run = CliRunner().invoke(main, ["db", "verify", *kernels, "--examples", "10", "--seed", "2", "--format", "json"])
    assert run.exit_code == 1 and "Traceback" not in run.output, run.output
    assert run.stderr.startswith("db verify: seed 2\n")  # before anything runs: a run that dies can be repeated
    assert "1 pass, 0 FAIL (flagged, no longer served), 1 error" in run.stderr
    table = {r["kernel"]: r for r in json.loads(run.stdout)}
    broken, good = table["empty_blind_add"], table["tail_bug_add"]  # in that order: the run went on
    assert broken["result"] == "error" and broken["examples"] == 0
    detail = broken["minimal failing problem / why skipped"]
    assert detail.startswith("verification raised InvalidOutputs: empty_blind_add's baseline returned a NoneType")
    assert "(at compare.py:" in detail and detail.endswith("not recorded")
    assert good["result"] == "pass" and good["examples"] >= 10

    with ConfigStore(str(user_db)) as store:
        rows = {r.kernel: r for r in store.best_rows()}
    assert rows["empty_blind_add"].verified_at is None and not rows["empty_blind_add"].flagged  # as it was
    assert rows["tail_bug_add"].verify_passed and rows["tail_bug_add"].verify_seed == 2


@pytest.mark.parametrize("empty", [dict(batch=0), dict(nq=0), dict(nk=0)], ids=["no batch", "no queries", "no keys"])
def test_attention_baselines_give_the_defined_result_on_empty_problems(empty):
    sizes = {"batch": 2, "nq": 300, "nk": 40, **empty}
    problem = attn.problem(sizes["batch"], 4, sizes["nq"], 64, kv_heads=2, nk=sizes["nk"], causal=True, layout="bnhd")
    for spec in (FLASH_ATTN, FLASH_ATTN_BACKWARD):
        inputs = spec.make_inputs(problem, torch.bfloat16, torch.device("cpu"), 0)
        base, ref = spec.baseline(inputs), spec.reference(inputs)
        check_references(spec, problem, base, ref)
        for b, r in zip(base, ref):
            assert torch.equal(b.double(), r)  # zeros, -inf log-sum-exps, or nothing at all
        assert check_problem(spec, dict(spec.space.default), problem, torch.bfloat16) is None
