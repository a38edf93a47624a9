"""The norms' kernels added as variants (the layer_norm / rms_norm backward's "tiles" kernel, group_norm's forward
"cached") extend the spaces their shipped rows were tuned in: the earlier hash each spec declares is the one every
shipped row tuned before them carries, each such row stays current and is served completed with the values it meant
(behind a row searched since, where its bucket has one), `autotune query` shows them current, and a shipped config
still launches here. The backward of group_norm, which gained nothing, keeps its own hash."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from stored_rows import shipped_rows, store_best

import autotune
from autotune import runtime
from autotune.cli import main
from autotune.kernels import layer_norm
from autotune.kernels.norm import problems as _norm_problems

EXTENDED = {
    "layer_norm_backward": {"kernel": "rows64", "BLOCK_M": 1},
    "rms_norm_backward": {"kernel": "rows64", "BLOCK_M": 1},
    "group_norm": {},
}
"""Each spec that gained a variant, with the values its stored configs are completed with."""


@pytest.mark.parametrize("kernel", EXTENDED)
def test_every_shipped_row_carries_the_earlier_hash_and_is_current_and_served_completed(kernel):
    spec = autotune.get(kernel)
    rows = shipped_rows(kernel)
    assert len(rows) >= 12
    earlier = spec.extends[0]  # the oldest: the space before the variant
    before = [r for r in rows if r.source_hash == earlier.source_hash]
    assert len(before) >= 12 and {r.source_hash for r in rows} <= set(spec.current_hashes)
    assert all(spec.row_is_current(r) for r in rows)
    # A bucket searched since serves the row of its newest version; its earlier rows stay behind it.
    newest: dict[tuple[str, str, str], int] = {}
    for r in rows:
        key = (r.gpu, r.dtype, r.bucket)
        newest[key] = min(newest.get(key, 99), spec.age(r.source_hash))
    served = spec.current_rows(rows)
    assert {(r.gpu, r.dtype, r.bucket) for r in served} == set(newest)
    assert all(spec.age(r.source_hash) == newest[(r.gpu, r.dtype, r.bucket)] for r in served)
    assert len(served) == sum(spec.age(r.source_hash) == newest[(r.gpu, r.dtype, r.bucket)] for r in rows)
    for r in rows:
        completed = spec.space.validate(spec.current_config(r))
        assert completed == ({**r.config, **EXTENDED[kernel]} if r in before else r.config)
        assert spec.space.rejects(completed, r.problem) is None, (r.dtype, r.bucket)


def test_the_backward_of_group_norm_gained_nothing_and_keeps_its_hash():
    spec = autotune.get("group_norm_backward")
    assert spec.extends == ()
    assert {r.source_hash for r in shipped_rows("group_norm_backward")} == {spec.source_hash}


@pytest.mark.parametrize("kernel", EXTENDED)
def test_query_shows_the_shipped_h100_rows_current(kernel):
    result = CliRunner().invoke(main, ["query", kernel, "--gpu", "H100", "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output[result.output.index("[") :])
    assert len(shown) >= 12 and all(r["current"] is True and r["source"] == "shipped" for r in shown)


@pytest.mark.filterwarnings("ignore::autotune.runtime.NoTunedConfigsWarning")  # the forward's default, here
def test_a_shipped_backward_config_stored_before_the_tiles_kernel_launches_the_first_kernel_here(user_db):
    spec = autotune.get("layer_norm_backward")
    before = [r for r in shipped_rows("layer_norm_backward") if r.source_hash == spec.extends[0].source_hash]
    row = min(before, key=lambda r: (r.config["BLOCK_N"], r.id))
    n = row.config["BLOCK_N"] - 5
    store_best(user_db, spec, spec.bucket(_norm_problems.problem([3, n], rms=False)), row.config,
               source_hash=spec.extends[0].source_hash)  # fmt: skip
    x = torch.randn(3, n, requires_grad=True)
    with runtime.record_launches() as launches:
        layer_norm(x, (n,)).square().sum().backward()
    assert ("layer_norm_backward", {**row.config, "kernel": "rows64", "BLOCK_M": 1}) in launches
    x64 = x.detach().double().requires_grad_()
    torch.nn.functional.layer_norm(x64, (n,)).square().sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-5)
