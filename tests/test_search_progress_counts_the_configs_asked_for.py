"""`search --trials N` evaluates N distinct configs: its bar counts those, to N and no further, and the table and
summary say how many more trials the sampler proposed (repeats, configs the constraints reject) and that they are
not counted."""

import dataclasses
import json
import re

from click.testing import CliRunner
from worker_kernels import SPACE

import autotune.kernels.vector_add.add as vector_add
from autotune.cli import main
from autotune.engine.outcome import TrialOutcome, TrialTally
from autotune.engine.result import SearchResult

FOUR_CONFIGS_ADD = dataclasses.replace(vector_add.SPEC, name="four_configs_add", space=SPACE, _hash=[])
"""vector_add with four configs: a random sampler asked for all four proposes some twice."""


def test_the_bar_the_table_and_the_summary_count_the_configs_asked_for(user_db):
    args = [
        "search",
        f"{__name__}:FOUR_CONFIGS_ADD",
        "--dtype",
        "fp32",
        "--shape",
        "3000",
        "--trials",
        "4",
        "--sampler",
        "random",
        "--examples",
        "2",
        "--final-examples",
        "2",
        "--format",
        "json",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)[0]
    repeats = int(re.fullmatch(r"ok:4 \(\+(\d+) repeats?\)", row["trials"]).group(1))
    assert repeats >= 1, row["trials"]  # the sampler's seed makes it repeat itself: what is being tested
    summary = re.search(r": 4 of 4 asked evaluated, in (\d+) trials \(not counted: (\d+) repeats?\)", result.stderr)
    assert summary and int(summary.group(1)) == 4 + repeats and int(summary.group(2)) == repeats, result.stderr
    steps = [int(n) for n in re.findall(r"\| (\d+)/4 \[", result.stderr)]
    assert steps and max(steps) == 4, result.stderr  # never past the configs asked for
    assert not re.search(r"\d+it \[", result.stderr), result.stderr  # tqdm's count past its total


def _outcome(number, block, outcome="ok"):
    return TrialOutcome(number, {"BLOCK_SIZE": block, "num_warps": 4, "num_stages": 1}, outcome, time_ms=1.0)


def test_a_tally_counts_each_config_once_and_says_what_it_did_not_count():
    trials = [
        _outcome(0, 128),
        _outcome(1, 256),
        _outcome(2, 128),
        _outcome(3, 512, "invalid"),
        _outcome(4, 512, "invalid"),
        _outcome(5, 1024, "incorrect"),
    ]
    tally = TrialTally()
    steps = [tally.add(t) for t in trials]
    assert steps == [True, True, False, False, False, True]  # a repeat and a rejected config take no step
    assert tally.evaluated == 3 and tally.rejected == 1 and tally.repeats == 2
    assert tally.describe() == "incorrect:1 invalid:1 ok:2 (+2 repeats)"
    assert tally.uncounted() == "not counted: 2 repeats, 1 rejected by the constraints"
    result = SearchResult(
        "k", "g", "fp32", "b", {}, None, None, None, None, 0, None, trials=trials, evaluations=3, budget=5
    )
    assert result.evaluated_summary() == (
        "3 of 5 asked evaluated, in 6 trials (not counted: 2 repeats, 1 rejected by the "
        "constraints); stopped early: the timeout ran out"
    )
