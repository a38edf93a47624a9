"""verify checks `examples` distinct problems that the config applies to. A draw its space's constraints
reject, or a repeat of a problem already passed, is drawn anew instead of counted: db verify asked for
200 problems per row and checked 68 (the rest did not fit the row's config), and reported those 68."""

import dataclasses
import json

import torch

from autotune.gate.verify import draw_problems, verify
from autotune.kernels.fused_softmax.softmax import SPEC

SOFTMAX = dataclasses.replace(SPEC, problems_for_config=None)
"""softmax drawing every problem for every config, as a user's kernel without `problems_for_config` does."""

SHORT_BLOCK = {"variant": "online", "BLOCK_SIZE": 64, "ROWS_PER_PROGRAM": 1, "num_warps": 2, "num_stages": 1}
"""Streams rows in blocks of 64: its constraints reject every row of 64 or fewer, most of those drawn."""
HUGE_BLOCK = {**SHORT_BLOCK, "BLOCK_SIZE": 16384, "num_warps": 8}
"""Applies only to rows longer than 16384: none under the interpreter's problem size."""


def test_a_config_that_fits_few_problems_is_checked_on_as_many_distinct_ones_as_asked():
    result = verify(SOFTMAX, SHORT_BLOCK, torch.float32, examples=10, seed=3)
    drawn = {json.dumps(p, sort_keys=True) for p in result.problems}
    assert result.passed and result.examples == 10 == len(drawn) == len(result.problems)
    assert all(SOFTMAX.space.rejects(SHORT_BLOCK, p) is None for p in result.problems)
    assert result.skipped > 0  # drawn, rejected by the constraints, and drawn anew


def test_a_config_that_fits_no_drawn_problem_is_reported_untested_not_raised():
    result = verify(SOFTMAX, HUGE_BLOCK, torch.float32, examples=10, seed=3)
    assert (result.examples, result.failure, result.passed) == (0, None, False)
    assert result.skipped > 100  # Hypothesis drew on until under 1% of draws could apply


def test_the_problems_drawn_ahead_are_the_ones_verify_then_checks():
    """What db verify and the search compile ahead, across worker processes, before the config is checked."""
    ahead = draw_problems(SOFTMAX, SHORT_BLOCK, torch.float32, examples=10, seed=3)
    result = verify(SOFTMAX, SHORT_BLOCK, torch.float32, examples=10, seed=3)
    assert result.passed and len(ahead) == 10 and ahead == result.problems
    assert draw_problems(SOFTMAX, SHORT_BLOCK, torch.float32, examples=10, seed=4) != ahead  # another seed, other draws
