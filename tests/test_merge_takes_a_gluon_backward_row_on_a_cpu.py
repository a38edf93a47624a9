"""`db merge` judges a stored flash_attn_backward row as on the GPU it names: a Gluon backward row tuned on an H100
merges on a CPU (which cannot run the Gluon kernels), while one whose config the Gluon kernel cannot take at its own
problem is refused, naming why, and nothing of its file is taken."""

import json

import pytest
from click.testing import CliRunner

import autotune
from autotune.cli import main
from autotune.db import BestRow, ConfigStore
from autotune.kernels.attention import problems as problems_
from autotune.search_spaces import flash_attn_backward_gluon as engine
from autotune.ship import merge

GLUON = {
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
PROBLEM = problems_.problem(4, 16, 4096, 128)


def gluon_row(config: dict, dtype: str = "bf16") -> BestRow:
    spec = autotune.get("flash_attn_backward")
    return BestRow(
        kernel=spec.name,
        source_hash=spec.source_hash,
        config_json=json.dumps(config),
        time_ms=1.0,
        dtype=dtype,
        gpu="H100",
        device_name="NVIDIA H100 80GB HBM3",
        bucket=spec.bucket(PROBLEM),
        problem_json=json.dumps({**PROBLEM, "dtype": dtype}),
        examples_verified=20,
        triton_version="3.6.0",
        torch_version="2.11.0",
    )


def test_a_gluon_backward_row_of_an_h100_merges_here(tmp_path):
    theirs, target = tmp_path / "h100.sqlite", tmp_path / "target.sqlite"
    with ConfigStore(str(theirs)) as store:
        store.record_best(gluon_row(GLUON))
    assert merge.row_refusal(gluon_row(GLUON)) is None
    result = CliRunner().invoke(main, ["db", "merge", str(theirs), "--db", str(target)])
    assert result.exit_code == 0 and "1 row(s) read, 1 taken" in result.output, result.output
    with ConfigStore(str(target), readonly=True) as store:
        [row] = store.best_rows(kernel="flash_attn_backward")
    assert row.config == GLUON and row.gpu == "H100"


@pytest.mark.parametrize(
    "config, dtype, why",
    [
        (GLUON, "fp32", "engine=gluon: it takes bf16 and fp16 inputs, not fp32"),
        ({**GLUON, "BLOCK_M": 128, "dq": "atomic"}, "bf16", "engine=gluon: the tiles take"),
        ({**GLUON, "num_warps": 8}, "bf16", "engine=gluon fixes num_warps=4"),
    ],
)
def test_a_gluon_backward_row_its_kernel_cannot_run_is_refused_naming_why(tmp_path, config, dtype, why):
    reason = merge.row_refusal(gluon_row(config, dtype))
    assert reason is not None and "cannot run on its own problem" in reason and why in reason, reason
    theirs, target = tmp_path / "bad.sqlite", tmp_path / "target.sqlite"
    with ConfigStore(str(theirs)) as store:
        store.record_best(gluon_row(config, dtype))
    result = CliRunner().invoke(main, ["db", "merge", str(theirs), "--db", str(target)])
    assert result.exit_code == 1 and why in result.output and "Traceback" not in result.output, result.output
