"""The layer_norm / rms_norm backward's second kernel (kernel="tiles"): BLOCK_M one-block rows at a time read once,
or a row read twice with its first pass kept in L2, computed and kept in partial rows in the data's accumulator
(float32 for 16-bit data, float64 for float32 data). Each such config passes the float64 gate on edge widths
(1, primes, not powers of two, rows read in chunks) and strided layouts; the space draws it beside the first kernel
and rejects what it cannot run; a stored row of it is what the public functions launch."""

from __future__ import annotations

import optuna
import pytest
import torch
from stored_rows import store_best

from autotune import runtime
from autotune.gate.verify import check_problem, verify
from autotune.kernels import layer_norm, rms_norm
from autotune.kernels.norm import layer_norm_backward, layer_norm_backward_tiles
from autotune.kernels.norm import problems as _norm_problems
from autotune.kernels.norm.layer_norm_backward import LAYER_NORM_BACKWARD, RMS_NORM_BACKWARD
from autotune.search_spaces.layer_norm import BACKWARD_SPACE as SPACE

pytestmark = [
    pytest.mark.usefixtures("user_db"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight"),
    pytest.mark.filterwarnings("ignore::autotune.runtime.NoTunedConfigsWarning"),  # the forward's default, here
]

SPECS = {"layer_norm_backward": LAYER_NORM_BACKWARD, "rms_norm_backward": RMS_NORM_BACKWARD}


def problem(shape, *, rms=False, **kw):
    return _norm_problems.problem(shape, rms=rms, **kw)


def tiles(**overrides):
    return SPACE.with_overrides(kernel="tiles", **overrides)


CONFIGS = {
    "tiles_4": tiles(BLOCK_M=4, BLOCK_N=64, READS=1, PROGRAMS_PER_SM=2, num_warps=2, num_stages=1),
    "atomic_tiles_2": tiles(variant="atomic", BLOCK_M=2, BLOCK_N=16, READS=1, PROGRAMS_PER_SM=1, num_warps=1),
    "read_twice": tiles(BLOCK_M=1, BLOCK_N=512, READS=2, PROGRAMS_PER_SM=2, num_warps=4, num_stages=2),
}
# Row counts that leave the last tile part empty, widths 1, primes and not powers of two, strided and padded rows.
EDGE = {
    "tiles_4": [
        problem([37, 61], residual=True, values="offset", layout="padded"),
        problem([7, 3, 13], norm_dims=2, values="constant", layout="strided", fp32_params=True),
        problem([5, 33], weight=False, bias=False, magnitude=1e4),
    ],
    "atomic_tiles_2": [
        problem([9, 13], residual=True, layout="strided"),
        problem([3, 1], values="constant"),
        problem([11, 2, 7], norm_dims=2, fp32_params=True, eps=0.1),
    ],
    "read_twice": [
        problem([3, 509], residual=True, layout="strided", values="offset"),
        problem([2, 300], layout="padded", weight=False, magnitude=1e4),
    ],
}


def for_kernel(problems, kernel):
    rms = kernel.startswith("rms")
    return [
        {**p, "bias": p["bias"] and not rms, "eps": None if rms and p["eps"] == 1e-5 else p["eps"]} for p in problems
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("kernel", SPECS)
def test_tiles_pass_the_float64_gate(kernel, name, dtype):
    edges = for_kernel(EDGE[name], kernel)
    assert [SPACE.rejects(CONFIGS[name], p) for p in edges] == [None] * len(edges)
    result = verify(SPECS[kernel], CONFIGS[name], dtype, examples=4, max_numel=96, seed=2, extra_problems=edges)
    assert result.passed and result.examples >= len(edges), result.failure and result.failure.describe()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("variant", ["partials", "atomic"])
@pytest.mark.parametrize("kernel", SPECS)
def test_a_row_too_wide_for_one_block_goes_in_chunks_read_twice(kernel, variant, dtype):
    wide = for_kernel([problem([2, 16411], residual=True, layout="strided")], kernel)[0]  # a prime past 16 x 32 x 32
    chunks = tiles(variant=variant, BLOCK_N=4096, READS=2, PROGRAMS_PER_SM=1, num_warps=8, num_stages=2)
    assert SPACE.rejects(chunks, wide) is None
    assert check_problem(SPECS[kernel], chunks, wide, dtype) is None


def test_rows_past_the_last_add_nothing_even_with_eps_zero():
    # rms_norm with eps=0: a masked row slot would be 0 * (1 / sqrt(0)) = NaN in the weight's gradient.
    x = torch.randn(5, 16)
    w = torch.randn(16)
    g = torch.randn(5, 16)
    x64, w64 = (t.double().requires_grad_() for t in (x, w))
    expected = torch.autograd.grad(torch.nn.functional.rms_norm(x64, [16], w64, 0.0), (x64, w64), g.double())
    inputs = RMS_NORM_BACKWARD.make_inputs(problem([5, 16], rms=True, eps=0.0), torch.float32, torch.device("cpu"), 0)
    inputs.update(x=x, weight=w, dy=g)
    out = (torch.empty(5, 16), torch.empty(16))
    RMS_NORM_BACKWARD.launch(inputs, tiles(BLOCK_M=4, BLOCK_N=16, READS=1, num_warps=1, num_stages=1), out)
    for ours, theirs in zip(out, expected, strict=True):
        torch.testing.assert_close(ours.double(), theirs, rtol=1e-5, atol=1e-6)


class _Recorded:
    """A Triton kernel whose launches are recorded (grid and arguments), then run."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            return self.kernel[grid](*args, **kwargs)

        return launch


@pytest.mark.parametrize(
    "dtype, kept", [(torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float64)]
)
def test_partial_rows_per_program_in_the_arithmetics_dtype_summed_by_a_second_kernel(monkeypatch, dtype, kept):
    main = _Recorded(layer_norm_backward_tiles._norm_backward_tiles_kernel)
    sums = _Recorded(layer_norm_backward._sum_partials_kernel)
    monkeypatch.setattr(layer_norm_backward_tiles, "_norm_backward_tiles_kernel", main)
    monkeypatch.setattr(layer_norm_backward, "_sum_partials_kernel", sums)
    inputs = LAYER_NORM_BACKWARD.make_inputs(problem([45, 40]), dtype, torch.device("cpu"), 0)
    out = (torch.empty(45, 40, dtype=dtype), torch.empty(40, dtype=dtype), torch.empty(40, dtype=dtype))
    config = tiles(BLOCK_M=8, BLOCK_N=64, READS=1, PROGRAMS_PER_SM=2, num_warps=2, num_stages=1)
    LAYER_NORM_BACKWARD.launch(inputs, config, out)
    ((grid, args, kwargs),) = main.launches
    # min(ceil(45 rows / 8 per tile) = 6, 2 per SM x 2 "SMs" of the interpreter) programs, one partial row each.
    assert grid == (4,) and kwargs["BLOCK_M"] == 8
    dw_partials, db_partials = args[6], args[7]
    assert dw_partials.shape == db_partials.shape == (4, 40) and dw_partials.dtype == db_partials.dtype == kept
    ((_, sum_args, _),) = sums.launches
    assert sum_args[0] is dw_partials and sum_args[1] is db_partials
    torch.testing.assert_close(out[1], dw_partials.double().sum(0).to(dtype))
    ref = LAYER_NORM_BACKWARD.reference(inputs)
    assert float((out[2].double() - ref[2]).abs().max()) < 1e-2 * float(ref[2].abs().max())


def test_the_first_kernel_still_runs_in_float64_one_row_a_program(monkeypatch):
    first = _Recorded(layer_norm_backward._norm_backward_kernel)
    monkeypatch.setattr(layer_norm_backward, "_norm_backward_kernel", first)
    inputs = LAYER_NORM_BACKWARD.make_inputs(problem([3, 40]), torch.float16, torch.device("cpu"), 0)
    out = (
        torch.empty(3, 40, dtype=torch.float16),
        torch.empty(40, dtype=torch.float16),
        torch.empty(40, dtype=torch.float16),
    )
    config = SPACE.with_overrides(BLOCK_N=64, READS=1, PROGRAMS_PER_SM=8, num_warps=2)
    assert config["kernel"] == "rows64"
    LAYER_NORM_BACKWARD.launch(inputs, config, out)
    ((grid, args, kwargs),) = first.launches
    assert grid == (3,) and args[6].dtype == torch.float64 and "BLOCK_M" not in kwargs


def test_the_grid_never_exceeds_the_row_tiles(monkeypatch):
    main = _Recorded(layer_norm_backward_tiles._norm_backward_tiles_kernel)
    monkeypatch.setattr(layer_norm_backward_tiles, "_norm_backward_tiles_kernel", main)
    inputs = RMS_NORM_BACKWARD.make_inputs(problem([3, 20], rms=True), torch.float32, torch.device("cpu"), 0)
    out = (torch.empty(3, 20), torch.empty(20))
    RMS_NORM_BACKWARD.launch(inputs, tiles(BLOCK_M=2, BLOCK_N=32, READS=1, PROGRAMS_PER_SM=8, num_warps=1), out)
    assert main.launches[0][0] == (2,)


def test_the_space_holds_rows_at_once_only_in_tiles_read_once_that_fit():
    p = problem([8192, 4096])
    assert SPACE.rejects(tiles(BLOCK_M=2, BLOCK_N=4096, READS=1, num_warps=16), p) is None
    assert "elements per thread" in SPACE.rejects(tiles(BLOCK_M=2, BLOCK_N=4096, READS=1, num_warps=8), p)
    assert "READS must be 1" in SPACE.rejects(tiles(BLOCK_M=2, BLOCK_N=4096, READS=2, num_warps=16), p)
    rows64 = SPACE.with_overrides(BLOCK_M=2, BLOCK_N=4096, READS=1, num_warps=16)
    assert "needs kernel=tiles, tiles_early or tiles_ahead" in SPACE.rejects(rows64, p)
    assert "exceeds the number of rows" in SPACE.rejects(
        tiles(BLOCK_M=8, BLOCK_N=1024, READS=1, num_warps=16), problem([3, 1024])
    )
    inputs = LAYER_NORM_BACKWARD.make_inputs(problem([4, 8]), torch.float32, torch.device("cpu"), 0)
    out = (torch.empty(4, 8), torch.empty(8), torch.empty(8))
    for wrong in (tiles(BLOCK_M=2, BLOCK_N=16, READS=2, num_warps=1), {**rows64, "BLOCK_N": 16, "num_warps": 1}):
        with pytest.raises(ValueError, match="BLOCK_M=2 rows at a time needs kernel='tiles' and READS=1"):
            LAYER_NORM_BACKWARD.launch(inputs, wrong, out)


def test_a_search_draws_both_kernels_and_row_tiles_only_where_tiles_read_once():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    p = problem([8192, 2048])
    drawn = [SPACE.suggest(study.ask(), p) for _ in range(120)]
    assert {c["kernel"] for c in drawn} == {"rows64", "tiles", "tiles_early", "tiles_ahead"}
    assert {c["BLOCK_M"] for c in drawn if c["kernel"] == "tiles" and c["READS"] == 1} == {1, 2, 4, 8}
    assert {c["BLOCK_M"] for c in drawn if c["kernel"] == "rows64" or c["READS"] == 2} == {1}
    runnable = [c for c in drawn if SPACE.rejects(c, p) is None]
    # no residual: tiles_early is tiles here
    assert {c["kernel"] for c in runnable} == {"rows64", "tiles", "tiles_ahead"}
    assert any(c["BLOCK_M"] > 1 for c in runnable)


@pytest.mark.parametrize("fn", [layer_norm, rms_norm], ids=["layer_norm", "rms_norm"])
def test_a_stored_tiles_row_is_what_the_public_backward_launches(user_db, fn):
    name = f"{fn.__name__}_backward"
    spec = SPECS[name]
    x = torch.randn(6, 40, dtype=torch.float16, requires_grad=True)
    w = (1 + torch.randn(40)).half().requires_grad_()
    stored = tiles(BLOCK_M=4, BLOCK_N=64, READS=1, PROGRAMS_PER_SM=1, num_warps=2, num_stages=1)
    store_best(user_db, spec, spec.bucket(problem([6, 40], rms=fn is rms_norm)), stored, dtype="fp16")
    with runtime.record_launches() as launches:
        fn(x, (40,), w).float().square().sum().backward()
    assert (name, stored) in launches
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    torch_fn = torch.nn.functional.rms_norm if fn is rms_norm else torch.nn.functional.layer_norm
    torch_fn(x64, (40,), w64).square().sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=2e-2, atol=5e-2)
