"""The layer_norm / rms_norm backward's tiles, tiles_early and tiles_ahead kernels compile for Hopper (sm_90a) with
the GPU machine's Triton without spilling, at every config of the widest one-block rows that the space accepts; the
configs that spill are among those it rejects.

The cases run tests/hopper_norm_backward_compile.py in a subprocess with the Triton at AUTOTUNE_GPU_TRITON
(`pip install -q --no-deps --target DIR triton==3.6.0`; .ci/run makes one); unset, they are skipped."""

import pytest
from gpu_triton import GPU_TRITON_VERSION, run_compile_script

from autotune.kernels.norm import problems as _norm_problems
from autotune.search_spaces.layer_norm import BACKWARD_SPACE as SPACE

COMPILE_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[dict, list[dict]]:
    """hopper_norm_backward_compile.py's header line and its line per case, compiled from a fresh kernel cache."""
    cache = tmp_path_factory.mktemp("triton-cache")
    what = "the norm backward compiles for the GPU without spilling"
    header, lines = run_compile_script("hopper_norm_backward_compile.py", what, cache)
    assert header["triton"] == GPU_TRITON_VERSION, header
    return header, lines


def accepted(line: dict) -> bool:
    problem = _norm_problems.problem([16384, line["config"]["BLOCK_N"]], rms=line["norm"] == "rms_norm", residual=True)
    return SPACE.rejects(SPACE.validate(line["config"]), problem) is None


def test_every_case_compiles(compiled):
    _, lines = compiled
    assert len(lines) == 60
    assert [(line["norm"], line["config"], line.get("error")) for line in lines if not line["ok"]] == []


def test_no_config_the_space_accepts_spills(compiled):
    _, lines = compiled
    kept = [line for line in lines if accepted(line)]
    assert {(line["config"]["READS"], line["config"]["BLOCK_M"]) for line in kept} == {(1, 1), (1, 2), (2, 1)}
    assert any(line["config"]["BLOCK_N"] == 8192 and line["config"]["READS"] == 1 for line in kept)
    assert {line["config"]["kernel"] for line in kept} == {"tiles", "tiles_early", "tiles_ahead"}
    spilled = [(line["norm"], line["config"], line["spill_stores"]) for line in kept if line["spill_stores"]]
    assert spilled == []


def test_the_configs_that_spill_are_rejected(compiled):
    _, lines = compiled
    spilling = [line for line in lines if line["ok"] and line["spill_stores"]]
    assert spilling, "nothing spilled: the cases no longer reach the registers' limit"
    assert [line["config"] for line in spilling if accepted(line)] == []
