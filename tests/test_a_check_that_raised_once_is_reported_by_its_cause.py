"""A check that raised once and passed on replay (on the H100, a float64 reference out of GPU memory while db verify
ran) reaches verify's caller as Hypothesis's FlakyFailure, whose own message says only "Inconsistent results from
replaying a test case!". The one-line summary db verify reports names the first exception inside it and where it was
raised."""

import pytest
from hypothesis.errors import FlakyFailure

from autotune.gate.verify import exception_summary
from autotune.measure.reverify import _raised_at


def out_of_memory_in_the_reference():
    raise MemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")


def test_a_flaky_failure_is_summarised_by_the_exception_inside_it():
    with pytest.raises(MemoryError) as caught:
        out_of_memory_in_the_reference()
    flaky = FlakyFailure("Inconsistent results from replaying a test case!", [caught.value])
    summary = exception_summary(flaky)
    assert summary.startswith("FlakyFailure: Inconsistent results from replaying a test case!")
    assert summary.endswith("(first: MemoryError: CUDA out of memory. Tried to allocate 20.00 MiB)")
    assert _raised_at(flaky).endswith("in out_of_memory_in_the_reference)")


def test_a_plain_exception_is_summarised_as_before():
    assert exception_summary(ValueError("bad\nmore")) == "ValueError: bad"
