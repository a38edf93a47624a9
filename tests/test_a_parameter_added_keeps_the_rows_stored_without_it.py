"""A space that gains a parameter (an engine to run on, say) declares it new in the earlier space it extends
(`EarlierSpace.before(..., new={name: earlier value})`): the rows stored before it existed lack its key and meant
that value. They keep their hash (the earlier space's, computed without the new parameter), hold where the
earlier space could have produced them, and are completed with the earlier value wherever they are used: served,
warm-starting a search, re-verified, exported."""

import json

import pytest
import torch
from click.testing import CliRunner
from test_a_variant_added_keeps_the_rows_of_the_space_it_extends import (
    EARLIER,
    TUNED_BEFORE,
    N,
    _add_a,
    _add_b,
    _add_c,
    launch,
    row,
    served,
    space,
    spec_of,
    vector_add,
)

from autotune import gpu
from autotune.cli import main
from autotune.db import ConfigStore
from autotune.engine.plan import row_key
from autotune.engine.warm_starts import warm_starts
from autotune.measure.reverify import reverify_rows
from autotune.space import Param, SearchSpace
from autotune.spec import EarlierSpace


def space_with_unroll(variants: tuple[str, ...]) -> SearchSpace:
    """space(variants) with a parameter it did not have: UNROLL (1 is what every earlier config meant)."""
    earlier = space(variants)
    return SearchSpace(params=(*earlier.params, Param("UNROLL", (1, 2))), default={**earlier.default, "UNROLL": 1})


def contiguous_launch(inputs, config, out):
    """The test kernel's launch on contiguous copies (it reads x and y as flat arrays), UNROLL aside."""
    x, y = inputs["x"].contiguous(), inputs["y"].contiguous()
    return out.copy_(launch({"x": x, "y": y}, config, torch.empty_like(x)))


def spec_with_unroll(earlier_sources, new):
    spec = spec_of((_add_a, _add_b, _add_c), ("a", "b", "c"))
    earlier = EarlierSpace.before(space_with_unroll(("a", "b", "c")), earlier_sources, new=new, variant=("a", "b"))
    return spec.__class__(
        **{
            **{f: getattr(spec, f) for f in ("name", "reference", "baseline", "problems", "make_inputs", "bucket")},
            **{f: getattr(spec, f) for f in ("cost", "presets", "parse_shape", "sources")},
            "space": space_with_unroll(("a", "b", "c")),
            "launch": contiguous_launch,
            "extends": (earlier,),
        }
    )


WIDER = spec_with_unroll((_add_a, _add_b), {"UNROLL": 1})
COMPLETED = {**TUNED_BEFORE, "UNROLL": 1}


def test_the_earlier_hash_is_the_one_computed_before_the_parameter_existed():
    assert WIDER.extends[0].source_hash == EARLIER.source_hash != WIDER.source_hash
    assert list(WIDER.extends[0].params) == list(EARLIER.space.names)


def test_an_earlier_row_without_the_key_holds_and_is_completed():
    stored = row(EARLIER.source_hash, TUNED_BEFORE)
    assert WIDER.row_is_current(stored)
    assert WIDER.is_current(EARLIER.source_hash, COMPLETED)  # the key present at its earlier value: the same
    assert not WIDER.is_current(EARLIER.source_hash, {**TUNED_BEFORE, "UNROLL": 2}), "a value the space did not have"
    assert WIDER.current_config(stored) == COMPLETED
    assert WIDER.space.validate(WIDER.current_config(stored)) == COMPLETED
    own = row(WIDER.source_hash, {**TUNED_BEFORE, "UNROLL": 2})
    assert WIDER.current_config(own) == own.config  # a row of this source: as stored


def test_the_runtime_serves_it_completed(user_db):
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(EARLIER.source_hash, TUNED_BEFORE))
    assert served(WIDER) == COMPLETED


def test_a_search_starts_from_it_completed(user_db):
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(EARLIER.source_hash, TUNED_BEFORE))
        key = row_key(WIDER, gpu.current_gpu(), torch.float32, vector_add.parse_shape(str(N)))
        assert warm_starts(WIDER, store, key)[1] == COMPLETED


def test_db_verify_checks_it_completed(user_db):
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(EARLIER.source_hash, TUNED_BEFORE))
        report = reverify_rows(store, kernels=[WIDER], examples=3, seed=0)
    assert [(v.result, v.config_json) for v in report.rows] == [("pass", json.dumps(TUNED_BEFORE))]


def test_an_export_writes_it_completed(user_db, tmp_path):
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(EARLIER.source_hash, TUNED_BEFORE))
    output = tmp_path / "configs.json"
    args = ["db", "export", "--db", str(user_db), "--kernel", f"{__name__}:WIDER", "--format", "json"]
    result = CliRunner().invoke(main, [*args, "--gpu", gpu.current_gpu().name, "-o", str(output)])
    assert result.exit_code == 0, result.output
    [config] = [
        c for by_dtype in json.loads(output.read_text()).values() for d in by_dtype.values() for c in d.values()
    ]
    assert config == COMPLETED


def test_a_new_parameter_is_declared_once_with_a_value_of_the_space():
    wide = space_with_unroll(("a", "b", "c"))
    with pytest.raises(ValueError, match=r"\['UNROLL'\] are new .* not given values too"):
        EarlierSpace.before(wide, (_add_a,), new={"UNROLL": 1}, UNROLL=(1,))
    with pytest.raises(ValueError, match=r"\['SPLIT'\] are not parameters"):
        EarlierSpace.before(wide, (_add_a,), new={"SPLIT": 1})
    with pytest.raises(ValueError, match=r"extends\[0\].new\['UNROLL'\] is 4, not a value of the space now"):
        spec_with_unroll((_add_a, _add_b), {"UNROLL": 4})
    with pytest.raises(ValueError, match=r"extends\[0\].params names .*expected the space's .*, 'UNROLL'\]"):
        earlier = {p.name: p.values for p in space(("a", "b")).params}  # without UNROLL, not declared new
        spec_of((_add_a, _add_b), ("a", "b")).__class__(
            **{**vars(WIDER), "extends": (EarlierSpace((_add_a,), earlier),)}
        )
