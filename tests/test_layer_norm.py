"""layer_norm and rms_norm forward, with and without the fused residual add: every variant passes the
gate against float64, the public functions match torch.nn.functional (constant rows, rows around a large
offset, rows wider than a block, several normalized dims, strided inputs), the stored config is the one
launched, the space rejects what should not run, and bad arguments fail before any launch."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from stored_rows import store_best

from autotune import runtime
from autotune.gate.compare import compare_outputs
from autotune.gate.verify import check_problem, verify
from autotune.kernels import layer_norm, rms_norm
from autotune.kernels.norm import problems as _norm_problems
from autotune.kernels.norm.layer_norm import LAYER_NORM, RMS_NORM
from autotune.search_spaces.layer_norm import FORWARD_SPACE as SPACE
from autotune.search_spaces.layer_norm import bucket

pytestmark = [
    # Public calls read a fresh, empty user database, so they run the default config.
    pytest.mark.usefixtures("user_db"),
    # Masked-off row slots divide 0 by 0 on purpose; the interpreter's numpy says so.
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SPECS = {"layer_norm": LAYER_NORM, "rms_norm": RMS_NORM}


def problem(shape, *, rms=False, **kw):
    return _norm_problems.problem(shape, rms=rms, **kw)


def config(**overrides):
    return SPACE.with_overrides(**overrides)


SINGLE_16 = config(variant="single", BLOCK_N=16, ROWS_PER_PROGRAM=4, num_warps=2, num_stages=1)
SINGLE_128 = config(variant="single", BLOCK_N=128, ROWS_PER_PROGRAM=2, num_warps=2, num_stages=1)
LOOPED_16 = config(variant="looped", BLOCK_N=16, ROWS_PER_PROGRAM=2, num_warps=1, num_stages=3)
CONFIGS = {"default": dict(SPACE.default), "single_16": SINGLE_16, "single_128": SINGLE_128, "looped_16": LOOPED_16}

# Problems each config applies to, with what breaks normalization kernels: constant rows, rows around
# 1e4, rows ending mid-block, many chunks, strided layouts, two normalized dims, no or fp32 parameters.
EDGE = {
    "default": [
        problem([3, 1]),
        problem([2, 1500], residual=True, values="offset", layout="padded"),
        problem([4, 7, 5], norm_dims=2, values="constant", weight=False, layout="strided"),
    ],
    "single_16": [
        problem([5, 13], residual=True, values="constant", fp32_params=True),
        problem([9, 16], values="offset", bias=False, layout="strided", eps=0.1),
    ],
    "single_128": [problem([3, 100], residual=True, layout="padded", magnitude=1e4), problem([2, 5, 25], norm_dims=2)],
    "looped_16": [
        problem([3, 50], residual=True, values="offset"),
        problem([5, 17], values="constant", layout="padded", weight=False),
        problem([2, 2, 9], norm_dims=2, residual=True, fp32_params=True),
    ],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("kernel", SPECS)
def test_configs_pass_the_gate(kernel, name, dtype):
    rms = kernel == "rms_norm"
    edges = [
        {**p, "bias": p["bias"] and not rms, "eps": None if rms and p["eps"] == 1e-5 else p["eps"]} for p in EDGE[name]
    ]
    assert [SPACE.rejects(CONFIGS[name], p) for p in edges] == [None] * len(edges)
    result = verify(SPECS[kernel], CONFIGS[name], dtype, examples=6, max_numel=96, seed=1, extra_problems=edges)
    assert result.passed, result.failure and result.failure.describe()


def test_the_gate_catches_an_unwritten_sum_and_a_wrong_row():
    def forgets_h_tail(inputs, config, out):
        LAYER_NORM.launch(inputs, config, out)
        out[1].view(-1)[-1] = float("nan")  # as if the kernel had not written it: out comes poisoned
        return out

    def skips_last_row(inputs, config, out):
        y = out[0] if isinstance(out, tuple) else out
        keep = y.clone()
        LAYER_NORM.launch(inputs, config, out)
        y.view(-1, y.shape[-1])[-1] = keep.view(-1, y.shape[-1])[-1]
        return out

    for launch, why in [(forgets_h_tail, "unwritten"), (skips_last_row, "unwritten")]:
        spec = dataclasses.replace(LAYER_NORM, launch=launch)
        result = verify(
            spec, dict(SPACE.default), torch.float32, examples=0, extra_problems=[problem([3, 40], residual=True)]
        )
        assert not result.passed and why in result.failure.reason


def _cancelling_inputs(residual: bool):
    """float32 rows with a bias, no weight, and the element of row 1 whose normalized value z is largest:
    (inputs, its column, its z), the bias there cancelling z to about 1e-6."""
    inputs = _norm_problems.forward_inputs(
        problem([2, 40], weight=False, residual=residual), torch.float32, torch.device("cpu"), 3
    )
    z = LAYER_NORM.reference({**inputs, "bias": None})
    z = z[0] if residual else z
    col = int(z[1].abs().argmax())
    inputs["bias"][col] = (1e-6 - z[1, col]).float()
    return inputs, col, float(z[1, col].abs())


@pytest.mark.parametrize("residual", [False, True])
def test_a_bias_cancelling_the_normalized_value_is_judged_against_the_size_of_both(residual):
    inputs, col, z = _cancelling_inputs(residual)
    ref = LAYER_NORM.reference(inputs)
    y_ref = ref[0] if residual else ref
    floor = LAYER_NORM.error_floor(inputs)
    y_floor = floor[0] if residual else floor
    assert abs(float(y_ref[1, col])) < 1e-5 and float(y_floor[1, col]) > z > 1.0
    assert not residual or floor[1] is None  # the sum h gets no floor
    z_all = LAYER_NORM.reference({**inputs, "bias": None})
    z_all = z_all[0] if residual else z_all
    assert bool((y_floor >= torch.maximum(z_all.abs(), inputs["bias"].double().abs())).all())  # the larger term
    assert LAYER_NORM.error_floor({**inputs, "bias": None}) is None and RMS_NORM.error_floor is None


def test_the_rounding_of_the_normalized_value_passes_where_a_wrong_value_still_fails():
    # On the H100 every config of the float32 16384x8192 bucket, single-pass and looped, failed a 4097-wide
    # row with a bias (error 0.000701 against a budget of 0.000308): y = z + b rounds z (about 1.5 there)
    # before the bias cancels it, and PyTorch's own output happened to round closer on that element. Every
    # variant of the kernel's arithmetic failed it alike (docs/kernels.md, layer_norm's error floor).
    inputs, col, z = _cancelling_inputs(False)
    ref = LAYER_NORM.reference(inputs)
    floor = LAYER_NORM.error_floor(inputs)
    perfect = ref.float()  # PyTorch as if it rounded every element exactly: the smallest budget there is
    half_ulp_of_z = ref.clone()
    half_ulp_of_z[1, col] += 0.5 * torch.finfo(torch.float32).eps * z
    assert compare_outputs(half_ulp_of_z.float(), ref, perfect)[2] is not None  # without the floor: fails
    assert compare_outputs(half_ulp_of_z.float(), ref, perfect, floor)[2] is None
    off = (ref * (1 + 1e-4)).float()
    assert compare_outputs(off, ref, perfect, floor)[2] is not None
    kernel_out = torch.empty_like(perfect)
    LAYER_NORM.launch(inputs, dict(SPACE.default), kernel_out)
    assert compare_outputs(kernel_out, ref, LAYER_NORM.baseline(inputs), floor)[2] is None


@pytest.mark.gpu
def test_the_bias_cancelling_row_that_failed_every_config_on_the_h100_passes():
    failed = problem([3, 4097], weight=False, residual=True)  # seed 4 of benchmarks/layer_norm_gate_probe.py's
    for tried in (
        config(variant="looped", BLOCK_N=1024, num_warps=4, num_stages=2),
        config(variant="single", BLOCK_N=8192, num_warps=32, num_stages=1),
    ):
        assert check_problem(LAYER_NORM, tried, failed, torch.float32, seed=4) is None


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_matches_torch_with_and_without_residual(dtype):
    x, r = torch.randn(6, 77).to(dtype), torch.randn(6, 77).to(dtype)
    w, b = torch.randn(77).to(dtype), torch.randn(77).to(dtype)
    tol = {} if dtype is torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(layer_norm(x, (77,), w, b), F.layer_norm(x, (77,), w, b), **tol)
    y, h = layer_norm(x, 77, w, b, eps=1e-3, residual=r)
    assert torch.equal(h, x + r)  # the sum in x's dtype, as a model computes it
    torch.testing.assert_close(y, F.layer_norm(x + r, (77,), w, b, eps=1e-3), **tol)
    torch.testing.assert_close(rms_norm(x, [77], w), F.rms_norm(x, [77], w), **tol)
    y, h = rms_norm(x, 77, residual=r)
    assert torch.equal(h, x + r)
    torch.testing.assert_close(y, F.rms_norm(x + r, [77]), **tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_rms_norm_eps_none_means_what_torch_does(dtype):
    # Rows so small that eps decides: torch takes float32's epsilon (its compute dtype), not x's.
    x = torch.full((2, 8), 1e-3).to(dtype)
    x[1] = 1e-2
    torch.testing.assert_close(rms_norm(x, 8), F.rms_norm(x, [8]))
    assert not torch.allclose(
        rms_norm(x, 8).float(), rms_norm(x, 8, eps=torch.finfo(torch.float16).eps).float(), rtol=0.1
    )


def test_several_trailing_dims_parameters_and_strided_inputs():
    x = torch.randn(3, 10, 4, 6).transpose(1, 2)  # normalized (10, 6) is not contiguous
    w, b = torch.randn(10, 6), torch.randn(10, 6)
    torch.testing.assert_close(layer_norm(x, (10, 6), w, b), F.layer_norm(x, (10, 6), w, b))
    r = torch.randn(3, 4, 10, 6)
    y, h = rms_norm(x, torch.Size([10, 6]), w, residual=r)
    torch.testing.assert_close(y, F.rms_norm(x + r, (10, 6), w))
    padded = torch.randn(5, 40)[:, :33]  # rows 40 apart: read in place
    torch.testing.assert_close(layer_norm(padded, 33), F.layer_norm(padded, (33,)))


def test_rows_that_reshape_only_by_a_copy_take_the_planned_launch(monkeypatch):
    # A U-Net's spatial transformer normalizes (batch, positions, channels) views of (batch, channels, positions):
    # their rows are copied as torch's norm copies them, then launched as a contiguous call shape is (planned
    # once, bound once), not through Triton's binding on every call (18 us of host a call more on the H200).
    from autotune.kernels.norm import layer_norm as module

    def per_call_binding(*args):
        raise AssertionError("forward_rows: bound on every call")

    monkeypatch.setattr(module, "forward_rows", per_call_binding)
    x = torch.randn(2, 24, 6).transpose(1, 2)
    r = torch.randn(2, 24, 6).transpose(1, 2)
    w, b = torch.randn(24), torch.randn(24)
    y = layer_norm(x, 24, w, b)
    torch.testing.assert_close(y, F.layer_norm(x, (24,), w, b))
    y, h = rms_norm(torch.randn(2, 6, 24), 24, w, residual=r)  # a non-contiguous residual alone
    assert y.is_contiguous() and h.is_contiguous()
    xg = x.clone().requires_grad_()
    layer_norm(xg, 24, w, b).square().sum().backward()
    xt = x.clone().requires_grad_()
    F.layer_norm(xt, (24,), w, b).square().sum().backward()
    torch.testing.assert_close(xg.grad, xt.grad)


def test_fp32_parameters_with_half_activations():
    x = torch.randn(4, 64).to(torch.bfloat16)
    w, b = torch.randn(64), torch.randn(64)
    y = layer_norm(x, 64, w, b)
    assert y.dtype == torch.bfloat16
    expect = F.layer_norm(x.double(), (64,), w.double(), b.double())
    torch.testing.assert_close(y.double(), expect, atol=3e-2, rtol=1e-2)


def test_constant_rows_normalize_to_exactly_zero():
    x = torch.full((4, 4095), 0.1)
    x[1] = -3.7
    assert bool((layer_norm(x, 4095) == 0).all())
    y, _ = layer_norm(x[:, :100], 100, residual=torch.full((4, 100), 0.3))
    assert bool((y == 0).all())


def test_rows_around_a_large_offset_keep_their_variance():
    # Mean 1e4, spread 1 in fp32: E[x^2] - E[x]^2 cancels to garbage here; torch's own error is ~1e-3.
    x = 1e4 + torch.randn(3, 2000)
    expect = F.layer_norm(x.double(), (2000,))
    assert (layer_norm(x, 2000).double() - expect).abs().max() < 2e-5
    for looped in (config(BLOCK_N=256, num_stages=1), config(BLOCK_N=64, num_warps=1)):
        out = (torch.full_like(x, float("nan")), torch.full_like(x, float("nan")))
        LAYER_NORM.launch(
            {
                "x": x,
                "residual": torch.zeros_like(x),
                "weight": None,
                "bias": None,
                "normalized_shape": (2000,),
                "eps": 1e-5,
            },
            looped,
            out,
        )
        assert (out[0].double() - expect).abs().max() < 2e-5


@pytest.mark.parametrize("kernel", SPECS)
def test_rows_wider_than_any_block(kernel):
    x, r = torch.randn(2, 65537) * 3 + 1, torch.randn(2, 65537)
    w = torch.randn(65537)
    if kernel == "layer_norm":
        y, h = layer_norm(x, 65537, w, residual=r)
        expect = F.layer_norm((x + r).double(), (65537,), w.double())
    else:
        y, h = rms_norm(x, 65537, w, residual=r)
        expect = F.rms_norm((x + r).double(), (65537,), w.double())
    assert torch.equal(h, x + r)
    torch.testing.assert_close(y.double(), expect, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 5), (3, 0)])
def test_empty_inputs_give_empty_results_without_a_launch(shape):
    x = torch.randn(shape)
    n = shape[-1]
    with runtime.record_launches() as launches:
        y, h = layer_norm(x, n, residual=torch.randn(shape))
        z = rms_norm(x, n)
    assert y.shape == h.shape == z.shape == x.shape
    assert launches == []


def test_public_calls_launch_the_stored_config_of_their_bucket(user_db):
    stored = config(variant="single", BLOCK_N=128, ROWS_PER_PROGRAM=2, num_warps=1, num_stages=1)
    store_best(user_db, LAYER_NORM, "m=8,n=128,res=1", stored)
    x, r = torch.randn(5, 100), torch.randn(5, 100)
    with runtime.record_launches() as launches:
        y, _ = layer_norm(x, 100, residual=r)  # exact bucket
        layer_norm(x, 100)  # res=0: the nearest bucket is res=1
        layer_norm(torch.randn(5, 300), 300)  # n=512: a single block of 128 cannot run, so the default
        rms_norm(x, 100, residual=r)  # another kernel's table
    torch.testing.assert_close(y, F.layer_norm(x + r, (100,)))
    assert launches == [
        ("layer_norm", stored),
        ("layer_norm", stored),
        ("layer_norm", dict(SPACE.default)),
        ("rms_norm", dict(SPACE.default)),
    ]


def test_a_call_planned_once_launches_a_new_row_after_the_database_changes(user_db):
    x, r = torch.randn(5, 100), torch.randn(5, 100)
    with runtime.record_launches() as launches:
        layer_norm(x, 100, residual=r)  # plans this call shape with the default config
        store_best(user_db, LAYER_NORM, "m=8,n=128,res=1", SINGLE_128)  # and clears the runtime's caches
        y, _ = layer_norm(x, 100, residual=r)
    assert launches == [("layer_norm", dict(SPACE.default)), ("layer_norm", SINGLE_128)]
    torch.testing.assert_close(y, F.layer_norm(x + r, (100,)))


def test_a_bad_call_after_good_ones_of_the_same_shape_still_fails_before_any_launch():
    x, r, w = torch.randn(4, 8), torch.randn(4, 8), torch.randn(8)
    layer_norm(x, 8, w, residual=r)
    rms_norm(x, 8, w, residual=r)
    bad = [
        (lambda: layer_norm(x, 8, w.double(), residual=r), TypeError, "weight must have a floating dtype"),
        (lambda: layer_norm(x, 8, w, residual=r.half()), TypeError, "one dtype"),
        (lambda: rms_norm(x, 8, w, residual=torch.randn(2, 8)), ValueError, "one shape"),
        (lambda: rms_norm(x.t(), 8, w, residual=r), ValueError, "must be the trailing dims"),
        (lambda: layer_norm(x, 8, w, eps=-1.0, residual=r), ValueError, "eps must be a finite float"),
    ]
    for call, error, message in bad:
        with runtime.record_launches() as launches, pytest.raises(error, match=message):
            call()
        assert launches == []


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x: layer_norm(x.int(), 8), TypeError, "x must have a floating dtype"),
        (lambda x: layer_norm([1.0], 1), TypeError, "x must be a torch.Tensor"),
        (lambda x: layer_norm(x, 7), ValueError, r"normalized_shape \(7,\) must be the trailing dims"),
        (lambda x: layer_norm(x, (3, 8)), ValueError, "must be the trailing dims"),
        (lambda x: layer_norm(x, ()), ValueError, "at least one dim"),
        (lambda x: layer_norm(x, 8.0), TypeError, "normalized_shape must be an int or a sequence"),
        (lambda x: layer_norm(x, [True]), TypeError, "normalized_shape must be an int or a sequence"),
        (lambda x: layer_norm(x, 8, torch.ones(7)), ValueError, r"weight must have shape normalized_shape \(8,\)"),
        (
            lambda x: layer_norm(x, 8, None, torch.ones(8, dtype=torch.int64)),
            TypeError,
            "bias must have a floating dtype",
        ),
        (
            lambda x: layer_norm(x.half(), 8, torch.ones(8, dtype=torch.bfloat16)),
            TypeError,
            "weight must have a floating dtype in",
        ),
        (lambda x: layer_norm(x, 8, torch.ones(8, device="meta")), ValueError, "weight must be on"),
        (lambda x: layer_norm(x, 8, residual=torch.ones(4, 9)), ValueError, "one shape"),
        (lambda x: layer_norm(x, 8, residual=torch.ones(4, 8).half()), TypeError, "one dtype"),
        (lambda x: layer_norm(x, 8, eps=-1.0), ValueError, "eps must be a finite float >= 0"),
        (lambda x: layer_norm(x, 8, eps=float("nan")), ValueError, "eps must be a finite float >= 0"),
        (lambda x: layer_norm(x, 8, eps=None), TypeError, "eps must be a float"),
        (lambda x: rms_norm(x, 8, eps="1e-6"), TypeError, "eps must be a float"),
        (lambda x: rms_norm(x, 8, torch.ones(4, 8)), ValueError, "weight must have shape"),
    ],
)
def test_bad_arguments_fail_before_any_launch(call, error, message):
    with runtime.record_launches() as launches, pytest.raises(error, match=message):
        call(torch.randn(4, 8))
    assert launches == []


def test_single_takes_exactly_the_row_rounded_up_and_looped_only_longer_rows():
    for n, block in [(1, 16), (16, 16), (17, 32), (1000, 1024), (4096, 4096), (65536, 65536)]:
        fits = config(variant="single", BLOCK_N=block, num_warps=max(1, block // 2048), num_stages=1)
        assert SPACE.rejects(fits, problem([1, n])) is None, n
        assert "single needs BLOCK_N" in SPACE.rejects(fits, problem([1, n + block]))
    looped = config(BLOCK_N=256, num_stages=1)
    assert SPACE.rejects(looped, problem([1, 257])) is None
    assert "holds the whole row" in SPACE.rejects(looped, problem([1, 256]))


@pytest.mark.parametrize("m", [0, 1, 3, 4096])
@pytest.mark.parametrize("n", [1, 2, 15, 1000, 1025, 4095, 11008, 65537, 300000])
def test_default_runs_on_every_problem(m, n):
    assert SPACE.rejects(dict(SPACE.default), problem([m, n])) is None
    assert SPACE.rejects(dict(SPACE.default), problem([m, 1, n], norm_dims=2, residual=True)) is None


@pytest.mark.parametrize(
    "overrides, m, n, reason",
    [
        (dict(variant="single", BLOCK_N=64), 1, 64, "no loop to pipeline"),
        (dict(variant="single", BLOCK_N=65536, num_warps=16, num_stages=1), 1, 65536, "elements per thread"),
        (dict(BLOCK_N=16, num_warps=2), 1, 100, "idle warps"),
        (dict(BLOCK_N=8192, ROWS_PER_PROGRAM=2, num_warps=32), 64, 100000, "ROWS_PER_PROGRAM > 1 needs"),
        (dict(BLOCK_N=64, ROWS_PER_PROGRAM=8), 4, 100, "exceeds the number of rows"),
    ],
)
def test_constraints_reject_configs_that_should_not_run(overrides, m, n, reason):
    assert reason in (SPACE.rejects(config(**overrides), problem([m, n])) or "")


def test_constraints_depend_only_on_the_bucket_and_suggestions_are_valid():
    import optuna

    big, same_bucket = problem([8192, 4096], residual=True), problem([4097, 2049], residual=True)
    assert len(SPACE.grid_for(big)) == len(SPACE.grid_for(same_bucket)) > 50
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(30):
        drawn = SPACE.suggest(study.ask(), big)
        if drawn["variant"] == "single":  # single's block and stages come from the row, not the sampler
            assert drawn["BLOCK_N"] == 4096 and drawn["num_stages"] == 1
            assert SPACE.rejects(drawn, big) is None or "elements per thread" in SPACE.rejects(drawn, big)


EDGE_CASES = {
    "n=1": lambda p: math.prod(p["shape"][-p["norm_dims"] :]) == 1,
    "prime": lambda p: p["shape"][-1] in (127, 509, 1021, 4093) and p["norm_dims"] == 1,
    "model widths": lambda p: p["shape"][-1] in (4095, 5120, 11008),
    "two dims": lambda p: p["norm_dims"] == 2,
    "empty": lambda p: 0 in p["shape"],
    "constant + residual": lambda p: p["values"] == "constant" and p["residual"],
    "offset + strided": lambda p: p["values"] == "offset" and p["layout"] == "strided",
    "fp32 parameters": lambda p: p["fp32_params"] and p["weight"] and p["bias"],
    "tiny eps": lambda p: p["eps"] == 1e-12,
}


def test_problems_reach_the_edge_cases():
    seen = set()

    @settings(max_examples=300, database=None, derandomize=True)
    @given(LAYER_NORM.problems(1 << 16))
    def draw(p):
        seen.update(name for name, wanted in EDGE_CASES.items() if wanted(p))

    draw()
    assert seen == set(EDGE_CASES)


def test_rms_problems_draw_eps_none_and_never_a_bias():
    drawn = []

    @settings(max_examples=100, database=None, derandomize=True)
    @given(RMS_NORM.problems(4096))
    def draw(p):
        drawn.append(p)

    draw()
    assert any(p["eps"] is None for p in drawn) and not any(p["bias"] for p in drawn)


def test_make_inputs_builds_the_rows_and_layouts_it_names():
    cpu = torch.device("cpu")
    inputs = LAYER_NORM.make_inputs(
        problem([6, 40], values="constant", residual=True, layout="padded"), torch.float16, cpu, 0
    )
    h = inputs["x"] + inputs["residual"]
    assert bool((h.float().var(-1) == 0).all()) and inputs["x"].stride() == (43, 1)
    inputs = LAYER_NORM.make_inputs(
        problem([6, 40], values="offset", layout="strided", fp32_params=True), torch.float32, cpu, 0
    )
    assert abs(inputs["x"].mean().item() - 1e4) < 1 and inputs["x"].stride() == (80, 2)
    assert inputs["weight"].dtype == torch.float32 and inputs["eps"] == 1e-5
    inputs = RMS_NORM.make_inputs(problem([2, 8], rms=True), torch.bfloat16, cpu, 0)
    assert inputs["eps"] == torch.finfo(torch.float32).eps and inputs["bias"] is None


def test_shapes_buckets_presets_and_cost():
    assert LAYER_NORM.parse_shape("8192x4096") == problem([8192, 4096])
    assert LAYER_NORM.parse_shape("8192x4096+res")["residual"] is True
    assert RMS_NORM.parse_shape("16x8")["bias"] is False
    with pytest.raises(ValueError, match="only suffix"):
        LAYER_NORM.parse_shape("8x8+gelu")
    assert bucket(problem([3, 5, 7, 11], norm_dims=2)) == "m=16,n=128,res=0"
    assert [LAYER_NORM.bucket(p) for p in LAYER_NORM.presets] == [
        "m=8192,n=4096,res=1",
        "m=16384,n=8192,res=1",
        "m=8192,n=4096,res=0",
    ]
    assert [LAYER_NORM.bucket(p) for p in LAYER_NORM.presets_here()] == ["m=8,n=512,res=1"]
    cost = LAYER_NORM.cost(problem([8192, 4096], residual=True), torch.bfloat16)
    assert cost.bytes == 4 * 8192 * 4096 * 2 + 2 * 4096 * 2 + 2 * 8192 * 4
    assert RMS_NORM.cost(problem([10, 10], rms=True), torch.float32).bytes == 2 * 100 * 4 + 10 * 4 + 10 * 4


def test_bucket_edges_stay_in_the_bucket_and_cover_the_hard_rows():
    edges = LAYER_NORM.bucket_edges(problem([8192, 4096], residual=True))
    assert {p["shape"][1] for p in edges} == {2049, 4095, 4096}
    assert {p["values"] for p in edges} == {"constant", "offset", "random"}
    assert all(p["residual"] for p in edges) and max(math.prod(p["shape"]) for p in edges) <= 33 * 4096


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("kernel", SPECS)
def test_both_variants_verify_on_the_gpu_at_the_preset_shapes(kernel, dtype):
    spec = SPECS[kernel]
    for preset in spec.presets:
        single = config(variant="single", BLOCK_N=preset["shape"][-1], num_warps=8, num_stages=1)
        for tried in (dict(SPACE.default), single):
            result = verify(spec, tried, dtype, examples=20, extra_problems=spec.edges_for(preset))
            assert result.passed, result.failure and result.failure.describe()
