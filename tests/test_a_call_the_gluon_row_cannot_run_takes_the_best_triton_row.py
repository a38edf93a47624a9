"""A flash_attn call whose bucket's row runs the Gluon engine, but that the Gluon kernel cannot take (here: tensors
on the CPU; on a GPU, a view TMA cannot read), launches the best stored Triton config instead: its bucket's own
Triton row (one of the space the engine extends, which the Gluon row shadows), else the default."""

import pytest
import torch
from stored_rows import store_best

import autotune
from autotune import runtime
from autotune.kernels.attention import flash_attn as fa
from autotune.kernels.attention import problems as problems_
from autotune.search_spaces import flash_attn_gluon as gluon
from autotune.search_spaces.flash_attn import FORWARD_SPACE

FA3 = {
    **gluon.GLUON_FIXED,
    "engine": "gluon",
    "BLOCK_M": 64,
    "BLOCK_N": 128,
    "num_stages": 2,
    "NUM_CONSUMERS": 2,
    "PINGPONG": True,
    "CONSUMER_REGISTERS": 240,
}
TRITON_ROW = {
    **{k: v for k, v in FORWARD_SPACE.default.items() if k not in {**gluon.TRITON, "combine": "kernel"}},
    "BLOCK_M": 32,
    "BLOCK_N": 64,
    "num_warps": 4,
}
"""A config stored before the engine existed (no Gluon keys, no `combine`), not the default."""
SERVED = {**TRITON_ROW, **gluon.TRITON, "combine": "kernel"}
"""TRITON_ROW as the runtime serves it: completed with the values the parameters new since then had before."""
PROBLEM = problems_.problem(1, 2, 130, 64)


@pytest.fixture
def hopper(monkeypatch):
    """The constraints as on a Hopper GPU: the Gluon row is this bucket's config; the kernel still refuses the call."""
    monkeypatch.setattr(gluon, "unavailable", lambda: None)


def plant(path, config: dict, source_hash: str) -> None:
    spec = autotune.get("flash_attn")
    store_best(path, spec, spec.bucket(PROBLEM), config, "fp16", {**PROBLEM, "dtype": "fp16"}, source_hash)


def attend() -> tuple[list, torch.Tensor, torch.Tensor]:
    q, k, v = (torch.randn(1, 2, 130, 64, dtype=torch.float16) for _ in range(3))
    runtime.clear_cache()
    with runtime.record_launches() as launches:
        out = fa.flash_attn(q, k, v)
    expected = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    return launches, out, expected


@pytest.mark.parametrize("with_triton_row", [True, False], ids=["its-triton-row", "no-triton-row"])
def test_the_gluon_rows_call_launches_the_best_triton_config(hopper, user_db, with_triton_row):
    spec = autotune.get("flash_attn")
    plant(user_db, FA3, spec.source_hash)
    if with_triton_row:
        plant(user_db, TRITON_ROW, spec.extends[0].source_hash)
    assert fa._TUNED.resolve(torch.float16, spec.bucket(PROBLEM), PROBLEM).config == FORWARD_SPACE.validate(FA3)
    launches, out, expected = attend()
    want = SERVED if with_triton_row else dict(FORWARD_SPACE.default)
    assert launches == [("flash_attn", want)]
    torch.testing.assert_close(out.double(), expected, atol=1e-2, rtol=1e-2)


def test_without_gluon_rows_a_call_launches_its_buckets_row_as_before(user_db):
    plant(user_db, TRITON_ROW, autotune.get("flash_attn").extends[0].source_hash)
    launches, out, expected = attend()
    assert launches == [("flash_attn", SERVED)]
    torch.testing.assert_close(out.double(), expected, atol=1e-2, rtol=1e-2)
