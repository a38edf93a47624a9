"""group_norm's nearest bucket: a call with no row of its own takes the config of the stored bucket whose groups
hold as many elements as its own (then the nearest group count), not the one whose groups merely share its channel
count or its spatial size; forward and backward alike."""

from __future__ import annotations

import pytest
import torch
from stored_rows import store_best

from autotune import runtime
from autotune.kernels import group_norm
from autotune.kernels.norm.group_norm import SPEC as FORWARD
from autotune.kernels.norm.group_norm_backward import SPEC as BACKWARD
from autotune.search_spaces.group_norm import bucket_distance
from autotune.spec import bucket_distance as generic_distance

CALL = {"shape": [2, 8, 16, 16], "groups": 4, "layout": "contiguous", "activation": "silu"}
"""Groups of 2 channels x 256 positions: bucket ng=8,cg=2,hw=256,cl=0."""
SAME_CHANNELS = "ng=8,cg=2,hw=64,cl=0"
"""Groups of the call's channel count, a quarter of its size: nearest by the generic rule (distance 2 against 4)."""
SAME_SIZE = "ng=8,cg=8,hw=64,cl=0"
"""Groups of the call's size (8 x 64 = 2 x 256), of other channels and positions."""


def test_the_generic_rule_would_take_the_bucket_with_the_same_channel_count():
    bucket = FORWARD.bucket(CALL)
    assert bucket == "ng=8,cg=2,hw=256,cl=0"
    assert generic_distance(bucket, SAME_CHANNELS) < generic_distance(bucket, SAME_SIZE)
    assert bucket_distance(bucket, SAME_SIZE) < bucket_distance(bucket, SAME_CHANNELS)


@pytest.mark.parametrize("spec", [FORWARD, BACKWARD], ids=lambda s: s.name)
def test_a_call_with_no_row_takes_the_config_of_the_bucket_whose_groups_are_its_size(user_db, spec):
    by_channels = spec.space.with_overrides(variant="looped", BLOCK=128, num_warps=1, num_stages=1)
    by_size = spec.space.with_overrides(variant="looped", BLOCK=256, num_warps=2, num_stages=1)
    for config in (by_channels, by_size):
        assert spec.space.rejects(config, CALL) is None  # both could run the call
    store_best(user_db, spec, SAME_CHANNELS, by_channels)
    store_best(user_db, spec, SAME_SIZE, by_size)
    choice = runtime.tuned(spec).resolve(torch.float32, spec.bucket(CALL), CALL)
    assert (choice.source, choice.bucket, choice.config) == ("nearest", SAME_SIZE, by_size)


def test_the_public_call_launches_the_same_size_buckets_config(user_db):
    by_channels = FORWARD.space.with_overrides(variant="looped", BLOCK=128, num_warps=1, num_stages=1)
    by_size = FORWARD.space.with_overrides(variant="looped", BLOCK=256, num_warps=2, num_stages=1)
    store_best(user_db, FORWARD, SAME_CHANNELS, by_channels)
    store_best(user_db, FORWARD, SAME_SIZE, by_size)
    x = torch.randn(CALL["shape"])
    with runtime.record_launches() as launches:
        y = group_norm(x, CALL["groups"], activation="silu")
    assert launches == [("group_norm", by_size)]
    torch.testing.assert_close(y, torch.nn.functional.silu(torch.nn.functional.group_norm(x, CALL["groups"])))


@pytest.mark.parametrize("key", ["m=8,n=2", "ng=8,cg=x,hw=64,cl=0", "ng=0,cg=2,hw=64,cl=0"])
def test_a_key_that_is_not_a_group_norm_bucket_is_infinitely_far(key):
    assert bucket_distance("ng=8,cg=2,hw=256,cl=0", key) == float("inf")
