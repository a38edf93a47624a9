"""A kernel that gains a variant (a new Triton function, a new value of `variant`) declares the space it extends
(`KernelSpec.extends`): the rows tuned before keep serving, warm-starting and counting as stored wherever their
config lies in that earlier space, and a row of the extended space wins its bucket. Editing one of the earlier
functions, or a config the earlier space could not have produced, leaves a row behind as before."""

import dataclasses
import json

import pytest
import torch
import triton
import triton.language as tl
from click.testing import CliRunner

import autotune.kernels.vector_add.add as vector_add
from autotune import gpu, runtime
from autotune.cli import main
from autotune.db import BestRow, ConfigStore
from autotune.engine.plan import row_key
from autotune.engine.retune import Study, stored
from autotune.engine.warm_starts import warm_starts
from autotune.runtime import registry
from autotune.runtime.query import stored_rows
from autotune.search_spaces.add import bucket
from autotune.space import Param, SearchSpace
from autotune.spec import EarlierSpace, KernelSpec

N = 300  # bucket n=512


@triton.jit
def _add_a(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def _add_b(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(y_ptr + offsets, mask=mask) + tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def _add_c(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) - -tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def _add_a_edited(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n  # an edit: the function's source is not what the earlier rows were tuned with
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


KERNELS = {"a": _add_a, "b": _add_b, "c": _add_c}


def space(variants: tuple[str, ...]) -> SearchSpace:
    return SearchSpace(
        params=(
            Param("variant", variants),
            Param("BLOCK_SIZE", (64, 128)),
            Param("num_warps", (1,)),
            Param("num_stages", (1,)),
        ),
        default={"variant": "a", "BLOCK_SIZE": 64, "num_warps": 1, "num_stages": 1},
    )


def launch(inputs, config, out):
    x, y = inputs["x"], inputs["y"]
    kernel = KERNELS[config["variant"]]
    kernel[(triton.cdiv(x.numel(), config["BLOCK_SIZE"]),)](
        x, y, out, x.numel(), BLOCK_SIZE=config["BLOCK_SIZE"], num_warps=config["num_warps"], num_stages=1
    )
    return out


def spec_of(sources, variants, extends=()) -> KernelSpec:
    return KernelSpec(
        name="variant_add",
        space=space(variants),
        launch=launch,
        reference=vector_add.reference,
        baseline=vector_add.baseline,
        problems=vector_add.problems,
        make_inputs=vector_add.make_inputs,
        bucket=bucket,
        cost=vector_add.cost,
        presets=[vector_add.parse_shape(str(N))],
        parse_shape=vector_add.parse_shape,
        sources=tuple(sources),
        extends=tuple(extends),
    )


EARLIER = spec_of((_add_a, _add_b), ("a", "b"))
EXTENDED = spec_of(
    (_add_a, _add_b, _add_c),
    ("a", "b", "c"),
    [EarlierSpace.before(space(("a", "b", "c")), (_add_a, _add_b), variant=("a", "b"))],
)
TUNED_BEFORE = {"variant": "b", "BLOCK_SIZE": 128, "num_warps": 1, "num_stages": 1}
TUNED_NOW = {"variant": "c", "BLOCK_SIZE": 64, "num_warps": 1, "num_stages": 1}


def add(spec: KernelSpec, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The public function of spec: the config the runtime serves for x's bucket."""
    n = x.numel()
    config = runtime.tuned(spec).lookup(x.dtype, n, lambda: bucket({"shape": [n]}), lambda: {"shape": [n]})
    runtime.note_launch(spec.name, config)
    return launch({"x": x, "y": y}, config, torch.empty_like(x))


def row(source_hash: str, config: dict, time_ms: float = 1.0) -> BestRow:
    return BestRow(
        kernel="variant_add",
        source_hash=source_hash,
        gpu=gpu.current_gpu().name,
        device_name="test",
        dtype="fp32",
        bucket=bucket({"shape": [N]}),
        config_json=json.dumps(config),
        problem_json=json.dumps(vector_add.parse_shape(str(N))),
        time_ms=time_ms,
        examples_verified=20,
        triton_version="x",
        torch_version="y",
    )


def served(spec: KernelSpec) -> dict:
    x, y = torch.randn(N), torch.randn(N)
    runtime.clear_cache()
    with runtime.record_launches() as launches:
        out = add(spec, x, y)
    torch.testing.assert_close(out, x + y)
    [(_, config)] = launches
    return config


def test_the_earlier_space_hashes_as_the_earlier_spec_did():
    assert EXTENDED.extends[0].source_hash == EARLIER.source_hash != EXTENDED.source_hash
    assert EXTENDED.current_hashes == (EXTENDED.source_hash, EARLIER.source_hash)
    for name in registry.shipped():  # a spec declaring its own sources and space as earlier: its own hash
        spec = registry.get(name)
        assert EarlierSpace.before(spec.space, spec.sources).source_hash == spec.source_hash, name


def test_the_runtime_serves_a_row_of_the_earlier_space(user_db):
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(EARLIER.source_hash, TUNED_BEFORE))
    assert served(EARLIER) == TUNED_BEFORE
    assert served(EXTENDED) == TUNED_BEFORE
    with ConfigStore(str(user_db)) as store:  # a retune counts the bucket as stored; a search starts from it
        assert stored(store, Study(EXTENDED, torch.float32, vector_add.parse_shape(str(N))), gpu.current_gpu().name)
        key = row_key(EXTENDED, gpu.current_gpu(), torch.float32, vector_add.parse_shape(str(N)))
        assert warm_starts(EXTENDED, store, key)[1] == TUNED_BEFORE


def test_a_search_starts_from_the_earlier_spaces_winners_of_neighbouring_buckets(user_db):
    with ConfigStore(str(user_db)) as store:
        store.record_best(dataclasses.replace(row(EARLIER.source_hash, TUNED_BEFORE), bucket="n=1024"))
        problem = vector_add.parse_shape(str(N))
        key = row_key(EXTENDED, gpu.current_gpu(), torch.float32, problem)
        assert warm_starts(EXTENDED, store, key, problem) == [EXTENDED.space.default, TUNED_BEFORE]
        assert warm_starts(spec_of((_add_a, _add_b, _add_c), ("a", "b", "c")), store, key, problem) == [
            EXTENDED.space.default
        ]


@pytest.mark.parametrize(
    "source_hash, config, why",
    [
        (EARLIER.source_hash, TUNED_NOW, "a variant the earlier space did not have"),
        ("0123456789abcdef", TUNED_BEFORE, "another source"),
    ],
)
def test_a_row_the_earlier_space_could_not_have_stored_is_not_current(user_db, source_hash, config, why):
    assert not EXTENDED.is_current(source_hash, config), why
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(source_hash, config))
        assert not stored(store, Study(EXTENDED, torch.float32, vector_add.parse_shape(str(N))), gpu.current_gpu().name)
    with pytest.warns(runtime.StoredConfigWarning, match="tuned for another kernel source"):
        assert served(EXTENDED) == EXTENDED.space.default


def test_editing_an_earlier_function_leaves_its_rows_behind(user_db):
    edited = spec_of(
        (_add_a_edited, _add_b, _add_c),
        ("a", "b", "c"),
        [EarlierSpace.before(space(("a", "b", "c")), (_add_a_edited, _add_b), variant=("a", "b"))],
    )
    assert edited.extends[0].source_hash != EARLIER.source_hash
    assert not edited.is_current(EARLIER.source_hash, TUNED_BEFORE)
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(EARLIER.source_hash, TUNED_BEFORE))
    with pytest.warns(runtime.StoredConfigWarning, match="tuned for another kernel source"):
        assert served(edited) == edited.space.default


def test_a_row_of_the_extended_space_wins_its_bucket(user_db):
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(EARLIER.source_hash, TUNED_BEFORE, time_ms=0.5))  # faster, but of the smaller space
        store.record_best(row(EXTENDED.source_hash, TUNED_NOW))
        assert [r.config for r in EXTENDED.current_rows(store.best_rows(kernel="variant_add"))] == [TUNED_NOW]
        key = row_key(EXTENDED, gpu.current_gpu(), torch.float32, vector_add.parse_shape(str(N)))
        assert warm_starts(EXTENDED, store, key)[1:3] == [TUNED_NOW, TUNED_BEFORE]
    assert served(EXTENDED) == TUNED_NOW


@triton.jit
def _add_d(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    total = -(-tl.load(x_ptr + offsets, mask=mask) - tl.load(y_ptr + offsets, mask=mask))
    tl.store(out_ptr + offsets, total, mask=mask)


KERNELS["d"] = _add_d
EXTENDED_TWICE = spec_of(
    (_add_a, _add_b, _add_c, _add_d),
    ("a", "b", "c", "d"),
    [  # oldest first
        EarlierSpace.before(space(("a", "b", "c", "d")), (_add_a, _add_b), variant=("a", "b")),
        EarlierSpace.before(space(("a", "b", "c", "d")), (_add_a, _add_b, _add_c), variant=("a", "b", "c")),
    ],
)


def test_a_bucket_serves_the_row_of_its_newest_version(user_db):
    # Three versions stored rows for one bucket: each newer search could draw the older configs, so its row wins.
    assert EXTENDED_TWICE.extends[1].source_hash == EXTENDED.source_hash
    newest = {"variant": "d", "BLOCK_SIZE": 128, "num_warps": 1, "num_stages": 1}
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(EARLIER.source_hash, TUNED_BEFORE, time_ms=0.25))  # the oldest, measured fastest
        store.record_best(row(EXTENDED.source_hash, TUNED_NOW, time_ms=0.5))
        rows = store.best_rows(kernel="variant_add")
        assert [r.config for r in EXTENDED_TWICE.current_rows(rows)] == [TUNED_NOW]
        assert served(EXTENDED_TWICE) == TUNED_NOW
        key = row_key(EXTENDED_TWICE, gpu.current_gpu(), torch.float32, vector_add.parse_shape(str(N)))
        assert warm_starts(EXTENDED_TWICE, store, key)[1:] == [TUNED_NOW, TUNED_BEFORE]  # the served one first
        store.record_best(row(EXTENDED_TWICE.source_hash, newest))
        assert [r.config for r in EXTENDED_TWICE.current_rows(store.best_rows(kernel="variant_add"))] == [newest]
    assert served(EXTENDED_TWICE) == newest


def test_query_marks_the_earlier_spaces_rows_current(user_db):
    with ConfigStore(str(user_db)) as store:
        store.record_best(row(EARLIER.source_hash, TUNED_BEFORE))
        store.record_best(row("0123456789abcdef", TUNED_NOW))
    assert [(r["config"], r["current"]) for r in stored_rows(EXTENDED, db_url=str(user_db))] == [
        (json.dumps(TUNED_NOW), False),
        (json.dumps(TUNED_BEFORE), True),
    ]
    result = CliRunner().invoke(
        main, ["query", f"{__name__}:EXTENDED", "--db", str(user_db), "--format", "json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output[result.output.index("[") :])
    assert sorted((r["config"], r["current"]) for r in shown) == sorted(
        [(json.dumps(TUNED_NOW), False), (json.dumps(TUNED_BEFORE), True)]
    )


def test_an_earlier_space_must_be_one_of_the_spec():
    with pytest.raises(ValueError, match=r"extends\[0\].sources .*_add_a_edited.* not among the spec's sources"):
        spec_of((_add_a, _add_b), ("a", "b"), [EarlierSpace.before(space(("a", "b")), (_add_a_edited,))])
    with pytest.raises(ValueError, match=r"extends\[0\].params\['variant'\] has \['z'\]"):
        spec_of((_add_a, _add_b), ("a", "b"), [EarlierSpace.before(space(("a", "b")), (_add_a,), variant=("a", "z"))])
    with pytest.raises(ValueError, match=r"extends\[0\].params names \['variant'\]"):
        spec_of((_add_a, _add_b), ("a", "b"), [EarlierSpace((_add_a,), {"variant": ("a",)})])
