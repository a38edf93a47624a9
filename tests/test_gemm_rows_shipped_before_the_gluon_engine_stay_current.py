"""The GEMM family's shipped rows, tuned before the Gluon engine: matmul, linear and gated_mlp extend the spaces they
were tuned in (the earlier hash each declares is the one every shipped row carries), each row stays current and is
served completed with engine="triton", `autotune query` shows them current, and a shipped config still launches here;
mlp and gated_mlp_backward, which gained nothing, keep their hashes."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from stored_rows import shipped_rows, store_best

import autotune
from autotune import runtime
from autotune.cli import main
from autotune.kernels.gemm.matmul import matmul
from autotune.search_spaces.gemm_gluon import TRITON
from autotune.spec import dtype_from_name

EXTENDED = ("matmul", "linear", "gated_mlp")
UNCHANGED = {"mlp": "9afe797bb1bb9471", "gated_mlp_backward": "b2aabf92cecd6f1f"}
"""The source hashes their shipped rows carry."""
EARLIER = {"matmul": "fef09b22e5fb885a", "linear": "fef09b22e5fb885a", "gated_mlp": "8c5fa9309049700e"}


@pytest.mark.parametrize("kernel", EXTENDED)
def test_every_shipped_row_carries_the_earlier_hash_and_is_current_and_served_completed(kernel):
    spec = autotune.get(kernel)
    (earlier,) = spec.extends
    assert earlier.source_hash == EARLIER[kernel] != spec.source_hash
    rows = shipped_rows(kernel)
    before = [r for r in rows if r.source_hash == earlier.source_hash]
    assert len(before) >= 3
    assert all(spec.row_is_current(r) for r in rows) and len(spec.current_rows(before)) == len(before)
    for r in before:
        assert "engine" not in r.config
        completed = spec.space.validate(spec.current_config(r))
        assert completed == {**r.config, **TRITON}
        assert spec.space.rejects(completed, spec.problem_for(r.problem, dtype_from_name(r.dtype))) is None
    # Rows searched since carry the current hash and name their engine (the Gluon GEMM's rows, and Triton rows that
    # won against it) and serve ahead of their buckets' earlier ones; every other bucket keeps its earlier row.
    since = [r for r in rows if r.source_hash != earlier.source_hash]
    assert all(r.source_hash == spec.source_hash and r.config["engine"] in ("gluon", "triton") for r in since)
    served = spec.current_rows(rows)
    assert all(r in served for r in since)
    assert {(r.gpu, r.dtype, r.bucket) for r in served} == {(r.gpu, r.dtype, r.bucket) for r in rows}


@pytest.mark.parametrize("kernel", UNCHANGED)
def test_the_kernels_that_gained_nothing_keep_their_hashes(kernel):
    spec = autotune.get(kernel)
    assert spec.extends == () and spec.source_hash == UNCHANGED[kernel]
    assert {r.source_hash for r in shipped_rows(kernel)} == {spec.source_hash}


@pytest.mark.parametrize("kernel", [*EXTENDED, "mlp"])
def test_query_shows_the_shipped_h100_rows_current(kernel):
    result = CliRunner().invoke(main, ["query", kernel, "--gpu", "H100", "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output[result.output.index("[") :])
    assert len(shown) >= 3 and all(r["current"] is True and r["source"] == "shipped" for r in shown)


def test_a_shipped_matmul_config_stored_before_the_engine_launches_here(user_db):
    """A shipped H100 row's config (its tiles cut to a small bucket here, as a grid), stored under the earlier hash:
    served completed with engine="triton", and it multiplies right under the interpreter."""
    spec = autotune.get("matmul")
    row = min(shipped_rows("matmul"), key=lambda r: r.id)
    tiles = {"variant": "tiled", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "SPLIT_K": 1}
    row_config = {**row.config, **tiles}
    problem = {"m": 80, "k": 96, "n": 72, "batch": 0}
    store_best(user_db, spec, spec.bucket(problem), row_config, dtype="fp32", source_hash=spec.extends[0].source_hash)
    a, b = torch.randn(80, 96), torch.randn(96, 72)
    with runtime.record_launches() as launches:
        y = matmul(a, b)
    assert launches == [("matmul", {**row_config, **TRITON})]
    torch.testing.assert_close(y.double(), a.double() @ b.double(), atol=1e-4, rtol=1e-4)
