"""group_norm forward: matches F.group_norm (+ silu / mish) in every layout and dtype, each variant passes
the gate, the gate and its problems catch the classic mistakes, the runtime launches the tuned config,
and bad arguments fail before any launch."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from hypothesis import find, settings

from autotune import gpu, runtime
from autotune.db import BestRow, ConfigStore
from autotune.gate.verify import verify
from autotune.kernels import group_norm
from autotune.kernels.norm.group_norm import SPEC, _launch
from autotune.kernels.norm.group_norm_backward import SPEC as BACKWARD_SPEC
from autotune.search_spaces.group_norm import SPACE, group_block

pytestmark = [
    pytest.mark.usefixtures("user_db"),  # an empty user database: public calls run the default config
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # masked lanes of the interpreter's numpy
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DEFAULT = dict(SPACE.default)
ACT = {None: lambda t: t, "silu": F.silu, "mish": F.mish}


def problem(
    shape,
    groups,
    layout="contiguous",
    activation="silu",
    affine="both",
    values="random",
    magnitude=1.0,
    scale=1.0,
    eps=1e-5,
):
    return {
        "shape": list(shape),
        "groups": groups,
        "layout": layout,
        "activation": activation,
        "affine": affine,
        "values": values,
        "magnitude": magnitude,
        "scale": scale,
        "eps": eps,
    }


def config(**overrides):
    return SPACE.with_overrides(**overrides)


def torch_group_norm(x, groups, weight=None, bias=None, eps=1e-5, activation=None):
    return ACT[activation](F.group_norm(x, groups, weight, bias, eps))


# Each config with problems it applies to: constant groups, a 1e4 offset, tails of the activations
# (scale 30), 1x1 spatial, odd and prime sizes, channels_last, 3-D and 5-D, groups ending mid-tile.
CASES = {
    "default": (
        dict(SPACE.default),
        [
            problem([2, 6, 1, 1], 3, "channels_last", "mish", values="constant"),
            problem([1, 4, 7, 5], 2, "channels_last", "silu", "weight", "offset", eps=1e-6),
            problem([3, 3, 37], 1, "sliced", "mish", "bias", scale=30.0),
        ],
    ),
    "single": (
        config(variant="single", BLOCK=64, num_warps=1, num_stages=1),
        [
            problem([2, 8, 3, 5], 2, "channels_last", "mish", values="constant", scale=30.0),
            problem([1, 6, 13], 2, "contiguous", "silu", "none", "offset"),
            problem([2, 4, 1, 2, 7], 1, "channels_last", "none", "bias", magnitude=1e4, eps=1e-2),
        ],
    ),
    "onepass": (
        config(variant="onepass", BLOCK=64, num_warps=1, num_stages=1),
        [
            problem([2, 8, 3, 5], 2, "channels_last", "mish", values="constant", scale=30.0),
            problem([1, 6, 13], 2, "contiguous", "silu", "none", "offset"),
            problem([2, 4, 1, 2, 7], 1, "channels_last", "none", "bias", magnitude=1e4, eps=1e-2),
            problem([1, 8, 3, 5], 2, "permuted", "silu", "weight", "offset"),
        ],
    ),
    "looped": (
        config(variant="looped", BLOCK=16, num_warps=1, num_stages=2),
        [
            problem([1, 6, 5, 7], 2, "channels_last", "mish", values="constant", scale=30.0),
            problem([2, 3, 41], 1, "permuted", "silu", "weight", "offset"),
        ],
    ),
    "split": (
        config(variant="split", BLOCK=16, SPLIT=4, num_warps=1, num_stages=1),
        [
            problem([1, 4, 9, 7], 2, "channels_last", "mish", "both", "offset", scale=30.0),
            problem([2, 2, 50], 2, "sliced", "silu", values="constant"),
        ],
    ),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("name", CASES)
def test_variants_pass_the_gate(name, dtype):
    cfg, edges = CASES[name]
    assert [SPACE.rejects(cfg, p) for p in edges] == [None] * len(edges)
    result = verify(SPEC, cfg, dtype, examples=3, max_numel=256, seed=1, extra_problems=edges)
    assert result.passed, result.failure and result.failure.describe()


LAYOUTS = {
    "contiguous_4d": lambda: torch.randn(2, 12, 5, 3),
    "channels_last": lambda: torch.randn(2, 12, 5, 3).to(memory_format=torch.channels_last),
    "channels_last_3d": lambda: torch.randn(2, 12, 2, 3, 3).to(memory_format=torch.channels_last_3d),
    "ncl": lambda: torch.randn(3, 12, 11),
    "ncl_channels_inner": lambda: torch.randn(3, 11, 12).transpose(1, 2),
    "nc": lambda: torch.randn(4, 12),
    "sliced": lambda: torch.randn(2, 12, 5, 8)[..., ::2],
    "permuted": lambda: torch.randn(2, 12, 3, 5).transpose(-1, -2),
}


@pytest.mark.parametrize("activation", [None, "silu", "mish"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_torch_in_every_layout_and_keeps_the_memory_format(layout, activation):
    x = LAYOUTS[layout]() * 3 + 1
    w, b = torch.randn(12), torch.randn(12)
    y = group_norm(x, 4, w, b, activation=activation)
    torch.testing.assert_close(y, torch_group_norm(x, 4, w, b, activation=activation))
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        assert y.is_contiguous(memory_format=torch.channels_last)
    if x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d):
        assert y.is_contiguous(memory_format=torch.channels_last_3d)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_keeps_the_dtype_and_matches_torch(dtype):
    x = torch.randn(2, 6, 4, 4).to(dtype)
    w, b = torch.randn(6).to(dtype), torch.randn(6).to(dtype)
    y = group_norm(x, 3, w, b, activation="silu")
    assert y.dtype == dtype
    # Computed in float32 or better and rounded once: within half an ulp of float64 (PyTorch rounds
    # twice, after the norm and after the activation, so it is no reference at this precision). The
    # interpreter truncates on a bfloat16 store where a GPU rounds to nearest: there, within one ulp.
    ref = torch_group_norm(x.double(), 3, w.double(), b.double(), activation="silu")
    ulps = 1.0 if dtype == torch.bfloat16 else 0.5
    rtol = ulps * torch.finfo(dtype).eps * 1.01
    torch.testing.assert_close(y.double(), ref, rtol=rtol, atol=torch.finfo(dtype).tiny)


def test_one_group_of_all_channels_and_groups_of_one_channel():
    x = torch.randn(2, 6, 7)
    torch.testing.assert_close(group_norm(x, 1), F.group_norm(x, 1))
    torch.testing.assert_close(group_norm(x, 6), F.group_norm(x, 6))
    # One element per group: zero variance, so xhat is exactly 0 and y exactly the (activated) bias.
    x, b = torch.randn(3, 6), torch.randn(6)
    assert torch.equal(group_norm(x, 6, None, b), b.expand(3, 6))
    assert torch.equal(group_norm(x, 6, None, b, activation="mish"), F.mish(b.double()).float().expand(3, 6))


def test_constant_groups_normalize_to_exactly_zero_and_large_offsets_keep_full_precision():
    x = torch.full((2, 4, 3, 3), 0.1)
    x[:, 2:] = 1e4 + torch.randn(2, 2, 3, 3)  # the second group: spread 1 around 1e4
    y = group_norm(x, 2)
    assert torch.equal(y[:, :2], torch.zeros_like(y[:, :2]))
    ref = F.group_norm(x.double(), 2)
    # float32 keeps about 1e-3 of the spread at 1e4; x - mean must not lose more (E[x^2] - E[x]^2 would).
    assert (y[:, 2:].double() - ref[:, 2:]).abs().max() < 1e-5


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 8e-3)], ids=["fp32", "bf16"])
def test_activation_tails_neither_overflow_nor_lose_precision(dtype, tolerance):
    x = torch.tensor([[[-1.0, 1.0]]]).expand(1, 64, 2).to(dtype)  # every group normalizes to -1, +1
    w = (torch.logspace(-2, 4, 64) * torch.tensor([1.0, -1.0]).repeat(32)).to(dtype)  # z: 0.01 to 1e4, both signs
    z = torch.tensor([-1.0, 1.0], dtype=torch.float64) * w.double()[:, None]
    for activation in ("silu", "mish"):
        y = group_norm(x, 64, w, None, eps=0, activation=activation)
        ref = ACT[activation](z)
        assert bool(y.isfinite().all())
        # Relative to each element: softplus as log(1 + exp(z)) rounds to 0 (error 1) once exp(z) < 6e-8.
        normal = ref.abs() > 1e-30
        assert ((y[0].double() - ref).abs()[normal] / ref.abs()[normal]).max() < tolerance


@pytest.mark.parametrize("shape", [(0, 4, 3), (2, 4, 0), (0, 4)])
def test_empty_inputs_give_empty_outputs_without_a_launch(shape):
    x = torch.randn(shape)
    with runtime.record_launches() as launches:
        y = group_norm(x, 2, torch.randn(4), torch.randn(4), activation="silu")
    assert y.shape == x.shape and launches == []


def _store_row(path, bucket, cfg, dtype="fp32"):
    with ConfigStore(str(path)) as store:
        store.record_best(
            BestRow(
                kernel="group_norm",
                source_hash=SPEC.source_hash,
                gpu=gpu.current_gpu().name,
                device_name="test",
                dtype=dtype,
                bucket=bucket,
                config_json=json.dumps(cfg),
                problem_json="{}",
                time_ms=1.0,
                examples_verified=1,
                triton_version="x",
                torch_version="y",
            )
        )


def test_public_call_launches_the_stored_config_of_its_bucket(user_db):
    x = torch.randn(2, 8, 5, 5).to(memory_format=torch.channels_last)
    p = problem(x.shape, 4, "channels_last")
    stored = config(variant="single", BLOCK=group_block(p), num_warps=2, num_stages=1)
    _store_row(user_db, SPEC.bucket(p), stored)
    with runtime.record_launches() as launches:
        y = group_norm(x, 4, activation="silu")
    assert launches == [("group_norm", stored)]
    torch.testing.assert_close(y, torch_group_norm(x, 4, activation="silu"))
    with runtime.record_launches() as launches:
        group_norm(x.contiguous(), 4)  # no row for the contiguous bucket: the nearest one's config runs
        group_norm(torch.randn(2, 8, 9, 9), 4)  # groups of 2 x 81: the stored block cannot hold them
    assert launches == [("group_norm", stored), ("group_norm", dict(SPACE.default))]


def test_a_call_planned_once_launches_a_new_row_after_the_database_changes(user_db):
    x = torch.randn(2, 8, 5, 5)
    p = problem(x.shape, 4, "contiguous")
    stored = config(variant="single", BLOCK=group_block(p), num_warps=2, num_stages=1)
    with runtime.record_launches() as launches:
        group_norm(x, 4)  # plans this call shape with the default config
        _store_row(user_db, SPEC.bucket(p), stored)
        runtime.clear_cache()
        y = group_norm(x, 4)
    assert launches == [("group_norm", dict(SPACE.default)), ("group_norm", stored)]
    torch.testing.assert_close(y, torch_group_norm(x, 4))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: group_norm(torch.arange(24).reshape(2, 4, 3), 2), TypeError, "x must have a floating dtype"),
        (lambda: group_norm([1.0], 1), TypeError, "x must be a torch.Tensor"),
        (lambda: group_norm(torch.randn(4), 2), ValueError, "at least 2 dims"),
        (lambda: group_norm(torch.randn(2, 6, 3), 4), ValueError, "divide the 6 channels"),
        (lambda: group_norm(torch.randn(2, 6, 3), 0), ValueError, "num_groups=0"),
        (lambda: group_norm(torch.randn(2, 6, 3), 2.0), TypeError, "num_groups must be an int"),
        (lambda: group_norm(torch.randn(2, 6, 3), 2, torch.randn(3)), ValueError, r"weight must have shape \(6,\)"),
        (lambda: group_norm(torch.randn(2, 6, 3), 2, None, torch.randn(6, 1)), ValueError, r"bias must have shape"),
        (lambda: group_norm(torch.randn(2, 6, 3), 2, torch.ones(6, dtype=torch.int32)), TypeError, "weight must have"),
        (lambda: group_norm(torch.randn(2, 6, 3), 2, torch.randn(6).half()), TypeError, "one dtype"),
        (lambda: group_norm(torch.randn(2, 6, 3), 2, torch.randn(6, device="meta")), ValueError, "weight must be on"),
        (lambda: group_norm(torch.randn(2, 6, 3), 2, activation="relu"), ValueError, "activation must be None"),
        (lambda: group_norm(torch.randn(2, 6, 3), 2, eps=-1.0), ValueError, "eps must be >= 0"),
        (lambda: group_norm(torch.randn(2, 6, 3), 2, eps="small"), TypeError, "eps must be a float"),
    ],
)
def test_bad_arguments_fail_before_any_launch(call, error, message):
    with runtime.record_launches() as launches:
        with pytest.raises(error, match=message):
            call()
    assert launches == []


def test_single_and_onepass_take_the_whole_group_and_the_others_tile_it():
    p = problem([2, 12, 5, 3], 4)  # groups of 3 channels x 15 positions: a 4 x 16 tile
    assert SPACE.rejects(config(variant="single", BLOCK=64, num_warps=2, num_stages=1), p) is None
    assert "single needs BLOCK == 64" in SPACE.rejects(config(variant="single", BLOCK=128, num_stages=1), p)
    assert "no loop to pipeline" in SPACE.rejects(config(variant="single", BLOCK=64, num_warps=2), p)
    assert SPACE.rejects(config(variant="onepass", BLOCK=64, num_warps=2, num_stages=1), p) is None
    assert "onepass needs BLOCK == 64" in SPACE.rejects(config(variant="onepass", BLOCK=32, num_stages=1), p)
    assert "no loop to pipeline" in SPACE.rejects(config(variant="onepass", BLOCK=64, num_warps=2), p)
    assert "holds the whole group" in SPACE.rejects(config(BLOCK=64, num_warps=1), p)
    assert SPACE.rejects(config(BLOCK=32, num_warps=1), p) is None
    assert "SPLIT must be 1" in SPACE.rejects(config(BLOCK=32, SPLIT=2, num_warps=1), p)
    assert "SPLIT >= 2" in SPACE.rejects(config(variant="split", BLOCK=16, num_warps=1), p)
    assert SPACE.rejects(config(variant="split", BLOCK=16, SPLIT=4, num_warps=1), p) is None
    assert "larger than the part" in SPACE.rejects(config(variant="split", BLOCK=32, SPLIT=4, num_warps=1), p)
    assert "exceeds the spatial size" in SPACE.rejects(config(variant="split", BLOCK=16, SPLIT=32, num_warps=1), p)
    assert "elements per thread" in SPACE.rejects(config(BLOCK=8192, num_warps=1), problem([1, 64, 256, 256], 2))
    assert "idle warps" in SPACE.rejects(config(BLOCK=32, num_warps=2), p)


def test_default_runs_everywhere_and_constraints_depend_only_on_the_bucket():
    for shape, groups in [([1, 1], 1), ([2, 64, 1, 1], 32), ([1, 3, 200000], 1), ([8, 512, 64, 64], 32)]:
        assert SPACE.rejects(dict(SPACE.default), problem(shape, groups)) is None
    a, b = problem([8, 512, 64, 64], 32), problem([5, 480, 45, 61], 30)  # same bucket: 16 x 4096 tiles
    assert SPEC.bucket(a) == SPEC.bucket(b) == "ng=256,cg=16,hw=4096,cl=0"
    assert SPACE.grid_for(a) == SPACE.grid_for(b)
    assert config(variant="single", BLOCK=65536, num_warps=16, num_stages=1) in SPACE.grid_for(a)


def test_shapes_buckets_presets_and_cost():
    p = SPEC.parse_shape("16x320x64x64,activation=silu,layout=channels_last")
    assert (p["shape"], p["groups"], p["activation"], p["layout"]) == ([16, 320, 64, 64], 32, "silu", "channels_last")
    assert SPEC.parse_shape("2x6x9")["groups"] == 6
    for bad in ("8x512x64x64,groups=3", "8", "4x8,activation=relu", "4x8,colour=red"):
        with pytest.raises(ValueError):
            SPEC.parse_shape(bad)
    assert [SPEC.bucket(p) for p in SPEC.presets] == [
        "ng=256,cg=16,hw=4096,cl=0",
        "ng=512,cg=16,hw=4096,cl=0",
        "ng=256,cg=16,hw=4096,cl=1",
    ]
    assert all(p["activation"] == "silu" for p in SPEC.presets)
    c = SPEC.cost(SPEC.presets[0], torch.bfloat16)
    numel = 8 * 512 * 64 * 64
    assert c.bytes == 2 * numel * 2 + 2 * 512 * 2 + 12 * 8 * 32 and c.flops == 10 * numel
    for p in SPEC.presets:  # the edge cases a tuned config must pass: its bucket, fewer groups
        assert {SPEC.bucket(e).split(",", 1)[1] for e in SPEC.bucket_edges(p)} == {SPEC.bucket(p).split(",", 1)[1]}


@pytest.mark.parametrize(
    "wanted",
    [
        lambda p: p["shape"][2:] in ([1, 1], [1]),
        lambda p: len(p["shape"]) > 2 and p["shape"][-1] in (7, 13, 31, 61, 127) and p["shape"][-1] % 2,
        lambda p: p["layout"] == "channels_last" and len(p["shape"]) == 5,
        lambda p: len(p["shape"]) == 3 and p["layout"] == "channels_last",
        lambda p: p["groups"] == p["shape"][1] > 1,
        lambda p: p["groups"] == 1 and p["shape"][1] > 1,
        lambda p: p["values"] == "constant" and p["activation"] == "mish",
        lambda p: p["values"] == "offset" and p["affine"] == "none",
        lambda p: p["scale"] == 30.0 and p["activation"] == "silu",
        lambda p: p["eps"] == 1e-2 and p["affine"] == "bias",
    ],
    ids=[
        "1x1",
        "odd-prime",
        "5d-channels-last",
        "3d-channels-last",
        "one-channel-groups",
        "one-group",
        "constant-mish",
        "offset",
        "activation-tails",
        "eps",
    ],
)
def test_problems_reach_the_edge_cases(wanted):
    found = find(SPEC.problems(1 << 13), wanted, settings=settings(max_examples=3000, database=None, derandomize=True))
    assert wanted(found)


def _with_launch(launch):
    return dataclasses.replace(SPEC, name="group_norm_wrong", launch=launch, _hash=[])


def _torch_candidate(stats):
    """A group_norm written in float32 PyTorch with the given (mean, var) formula, as a candidate kernel."""

    def launch(inputs, cfg, out):
        x, g = inputs["x"].float(), inputs["groups"]
        xg = x.reshape(x.shape[0], g, -1)
        mean, var = stats(xg)
        rstd = (var + inputs["eps"]).rsqrt()
        xhat = ((xg - mean[..., None]) * rstd[..., None]).reshape(x.shape)
        z = xhat * (1.0 if inputs["weight"] is None else inputs["weight"].float().view(1, -1, *[1] * (x.dim() - 2)))
        z = z + (0.0 if inputs["bias"] is None else inputs["bias"].float().view(1, -1, *[1] * (x.dim() - 2)))
        out[0].copy_(ACT[None if inputs["activation"] == "none" else inputs["activation"]](z))
        out[1].copy_(mean)
        out[2].copy_(rstd)
        return out

    return launch


def test_the_gate_catches_a_one_pass_variance_on_large_offsets():
    one_pass = _torch_candidate(lambda xg: (xg.mean(-1), (xg * xg).mean(-1) - xg.mean(-1) ** 2))
    offset = problem([2, 4, 9, 9], 2, activation="none", affine="none", values="offset")
    assert verify(SPEC, DEFAULT, torch.float32, examples=1, extra_problems=[offset]).passed
    failed = verify(_with_launch(one_pass), DEFAULT, torch.float32, examples=1, extra_problems=[offset])
    assert failed.failure is not None and failed.failure.problem == offset


def test_the_gate_catches_a_naive_mish_in_the_tails():
    def naive_mish(inputs, cfg, out):
        SPEC.launch({**inputs, "activation": "none"}, DEFAULT, out)
        z = out[0].float()
        out[0].copy_(z * torch.tanh(torch.log(1 + torch.exp(z))))  # overflows, and is 0 for z << 0
        return out

    tails = problem([1, 8, 4, 4], 4, activation="mish", scale=30.0)
    assert verify(SPEC, DEFAULT, torch.float32, examples=1, extra_problems=[tails]).passed
    failed = verify(_with_launch(naive_mish), DEFAULT, torch.float32, examples=1, extra_problems=[tails])
    assert failed.failure is not None


def test_the_gate_catches_an_unwritten_group():
    def skips_last_group(inputs, cfg, out):
        x = inputs["x"]
        n = x.shape[0]
        SPEC.launch({**inputs, "x": x[: n - 1]}, DEFAULT, tuple(t[: n - 1] for t in out))
        return out

    failed = verify(
        _with_launch(skips_last_group), DEFAULT, torch.float32, examples=1, extra_problems=[problem([2, 4, 3, 3], 2)]
    )
    assert failed.failure is not None and "unwritten" in failed.failure.reason


@pytest.mark.parametrize("spec", [SPEC, BACKWARD_SPEC], ids=["forward", "backward"])
def test_the_gate_launches_into_outputs_laid_out_as_the_public_function_gives_them(spec):
    # A channels-last x gets a channels-last y (and dx) from the public functions: the gate poisons, and the search
    # times, that layout, so a config is checked writing the strides users' calls write (a channel stride of 1 is
    # specialized by Triton, and the onepass kernel once failed to compile there).
    seen = []

    def records(inputs, cfg, out):
        seen.append((torch.empty_like(inputs["x"]).stride(), out[0].stride(), bool(out[0].isnan().all())))
        return spec.launch(inputs, cfg, out)

    channels_last = problem([2, 8, 5, 5], 4, layout="channels_last")
    space_default = dict(spec.space.default)
    checked = dataclasses.replace(spec, name=f"{spec.name}_recorded", launch=records, _hash=[])
    assert verify(checked, space_default, torch.float32, examples=1, extra_problems=[channels_last]).failure is None
    assert all(public == given and poisoned for public, given, poisoned in seen)
    assert any(given[1] == 1 for _, given, _ in seen)  # the channels-last problem's y: channels innermost


@pytest.mark.parametrize("variant", ["single", "onepass", "looped", "split"])
def test_the_saved_mean_of_zero_mean_groups_keeps_float64_precision(variant):
    # Judged relative to its own small size, the mean of zero-mean data is where float32 sums fail the
    # gate on an H100 (a few 1e-8 off; 7e-6 relative here): the sums that give it are float64, even for
    # 16-bit data whose deviations are summed in float32.
    x = torch.randn(2, 8, 64, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    y = torch.empty_like(x)
    mean, rstd = torch.empty(2, 2, dtype=torch.float64), torch.empty(2, 2)
    block = {"single": 16384, "onepass": 16384, "looped": 1024, "split": 1024}[variant]
    cfg = config(variant=variant, BLOCK=block, SPLIT=4 if variant == "split" else 1, num_warps=4, num_stages=1)
    _launch(x, y, None, None, mean, rstd, 2, 1e-5, "none", cfg)
    exact = x.double().reshape(2, 2, -1).mean(-1)
    assert ((mean - exact).abs() / exact.abs()).max() < 1e-7
    torch.testing.assert_close(y, F.group_norm(x.double(), 2).to(torch.bfloat16), atol=0.02, rtol=0.02)
