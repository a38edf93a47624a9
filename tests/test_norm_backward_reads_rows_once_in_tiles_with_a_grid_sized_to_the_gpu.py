"""The layer_norm / rms_norm backward reads BLOCK_M one-block rows at a time, once (READS=1), in a grid of
PROGRAMS_PER_SM programs per SM, each owning one partial row of the weight and bias gradients, kept in the
arithmetic's dtype (float32 for 16-bit data, float64 for float32 data) and summed by a second small kernel:
each such config passes the float64 gate on edge widths and strided layouts, and the space says what fits."""

from __future__ import annotations

import pytest
import torch

from autotune.kernels import _norm_problems, layer_norm, layer_norm_backward, rms_norm
from autotune.kernels.layer_norm_backward import LAYER_NORM_BACKWARD, RMS_NORM_BACKWARD
from autotune.search_spaces.layer_norm import BACKWARD_SPACE as SPACE
from autotune.verify import check_problem, verify

pytestmark = [pytest.mark.usefixtures("user_db"), pytest.mark.filterwarnings("ignore::RuntimeWarning")]

SPECS = {"layer_norm_backward": LAYER_NORM_BACKWARD, "rms_norm_backward": RMS_NORM_BACKWARD}


def problem(shape, *, rms=False, **kw):
    return _norm_problems.problem(shape, rms=rms, **kw)


def config(**overrides):
    return SPACE.with_overrides(**overrides)


TILES_4 = config(BLOCK_M=4, BLOCK_N=64, READS=1, PROGRAMS_PER_SM=2, num_warps=2, num_stages=1)
ATOMIC_TILES_2 = config(variant="atomic", BLOCK_M=2, BLOCK_N=16, READS=1, PROGRAMS_PER_SM=1, num_warps=1, num_stages=2)
CONFIGS = {"tiles_4": TILES_4, "atomic_tiles_2": ATOMIC_TILES_2}
# Row counts that leave the last tile part empty (rows past the last are masked), primes and one-short widths.
EDGE = {
    "tiles_4": [problem([37, 61], residual=True, values="offset", layout="padded"),
                problem([7, 3, 13], norm_dims=2, values="constant", layout="strided", fp32_params=True),
                problem([5, 33], weight=False, bias=False, magnitude=1e4)],
    "atomic_tiles_2": [problem([9, 13], residual=True, layout="strided"), problem([3, 1], values="constant"),
                       problem([11, 2, 7], norm_dims=2, fp32_params=True, eps=0.1)],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("kernel", SPECS)
def test_row_tiles_pass_the_float64_gate(kernel, name, dtype):
    rms = kernel.startswith("rms")
    edges = [{**p, "bias": p["bias"] and not rms, "eps": None if rms and p["eps"] == 1e-5 else p["eps"]}
             for p in EDGE[name]]
    assert [SPACE.rejects(CONFIGS[name], p) for p in edges] == [None] * len(edges)
    result = verify(SPECS[kernel], CONFIGS[name], dtype, examples=6, max_numel=96, seed=2, extra_problems=edges)
    assert result.passed and result.examples >= len(edges), result.failure and result.failure.describe()


@pytest.mark.parametrize("kernel", SPECS)
def test_a_row_past_64k_goes_in_chunks_read_twice(kernel):
    wide = problem([2, 65537], rms=kernel.startswith("rms"), residual=True, layout="padded")
    assert check_problem(SPECS[kernel], dict(SPACE.default), wide, torch.float32) is None


def test_rows_past_the_last_add_nothing_even_with_eps_zero():
    # rms_norm with eps=0: a masked row slot would be 0 * (1 / sqrt(0)) = NaN in the weight's gradient.
    x = torch.randn(5, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    g = torch.randn(5, 16)
    dy, x64, w64 = (t.detach().double().requires_grad_() for t in (g, x, w))
    expected = torch.autograd.grad(torch.nn.functional.rms_norm(x64, [16], w64, 0.0), (x64, w64), dy)
    inputs = RMS_NORM_BACKWARD.make_inputs(problem([5, 16], rms=True, eps=0.0), torch.float32, torch.device("cpu"), 0)
    inputs.update(x=x.detach(), weight=w.detach(), dy=g)
    out = (torch.empty(5, 16), torch.empty(16))
    RMS_NORM_BACKWARD.launch(inputs, config(BLOCK_M=4, BLOCK_N=16, READS=1, num_warps=1, num_stages=1), out)
    for ours, theirs in zip(out, expected):
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


@pytest.mark.parametrize("dtype, kept", [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                                         (torch.float32, torch.float64)])
def test_partial_rows_per_program_in_the_arithmetics_dtype_summed_by_a_second_kernel(monkeypatch, dtype, kept):
    main = _Recorded(layer_norm_backward._norm_backward_kernel)
    sums = _Recorded(layer_norm_backward._sum_partials_kernel)
    monkeypatch.setattr(layer_norm_backward, "_norm_backward_kernel", main)
    monkeypatch.setattr(layer_norm_backward, "_sum_partials_kernel", sums)
    p = problem([45, 40])
    inputs = LAYER_NORM_BACKWARD.make_inputs(p, dtype, torch.device("cpu"), 0)
    out = (torch.empty(45, 40, dtype=dtype), torch.empty(40, dtype=dtype), torch.empty(40, dtype=dtype))
    LAYER_NORM_BACKWARD.launch(inputs, config(BLOCK_M=8, BLOCK_N=64, READS=1, PROGRAMS_PER_SM=2, num_warps=2,
                                              num_stages=1), out)
    ((grid, args, kwargs),) = main.launches
    # min(ceil(45 rows / 8 per tile) = 6, 2 per SM x 2 "SMs" of the interpreter) programs, one partial row each.
    assert grid == (4,) and kwargs["BLOCK_M"] == 8
    dw_partials, db_partials = args[6], args[7]
    assert dw_partials.shape == db_partials.shape == (4, 40) and dw_partials.dtype == db_partials.dtype == kept
    ((_, sum_args, _),) = sums.launches
    assert sum_args[0] is dw_partials and sum_args[1] is db_partials
    torch.testing.assert_close(out[1], dw_partials.sum(0).to(dtype))
    ref = LAYER_NORM_BACKWARD.reference(inputs)
    assert float((out[2].double() - ref[2]).abs().max()) < 1e-2 * float(ref[2].abs().max())


def test_the_grid_never_exceeds_the_row_tiles(monkeypatch):
    main = _Recorded(layer_norm_backward._norm_backward_kernel)
    monkeypatch.setattr(layer_norm_backward, "_norm_backward_kernel", main)
    inputs = RMS_NORM_BACKWARD.make_inputs(problem([3, 20], rms=True), torch.float32, torch.device("cpu"), 0)
    out = (torch.empty(3, 20), torch.empty(20))
    RMS_NORM_BACKWARD.launch(inputs, config(BLOCK_M=2, BLOCK_N=32, READS=1, PROGRAMS_PER_SM=8, num_warps=1), out)
    assert main.launches[0][0] == (2,)


def test_space_holds_rows_at_once_only_where_they_are_read_once_and_fit():
    p = problem([8192, 4096])
    assert SPACE.rejects(config(BLOCK_M=2, BLOCK_N=4096, READS=1, num_warps=16), p) is None
    assert "elements per thread" in SPACE.rejects(config(BLOCK_M=2, BLOCK_N=4096, READS=1, num_warps=8), p)
    assert "READS must be 1" in SPACE.rejects(config(BLOCK_M=2, BLOCK_N=4096, READS=2, num_warps=16), p)
    assert "exceeds the number of rows" in SPACE.rejects(config(BLOCK_M=8, BLOCK_N=1024, READS=1, num_warps=16),
                                                         problem([3, 1024]))
    with pytest.raises(ValueError, match="BLOCK_M=2 rows at a time needs READS=1"):
        inputs = LAYER_NORM_BACKWARD.make_inputs(problem([4, 8]), torch.float32, torch.device("cpu"), 0)
        LAYER_NORM_BACKWARD.launch(inputs, config(BLOCK_M=2, BLOCK_N=16, READS=2, num_warps=1),
                                   (torch.empty(4, 8), torch.empty(8), torch.empty(8)))


def test_a_search_draws_row_tiles_for_rows_read_once():
    import optuna

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = [SPACE.suggest(study.ask(), problem([8192, 2048])) for _ in range(60)]
    assert {c["BLOCK_M"] for c in drawn if c["READS"] == 1} == {1, 2, 4, 8}
    assert {c["BLOCK_M"] for c in drawn if c["READS"] == 2} == {1}


@pytest.mark.parametrize("fn", [layer_norm, rms_norm], ids=["layer_norm", "rms_norm"])
def test_gradcheck_through_the_public_functions(fn):
    # float32 (the public norms take fp32, fp16, bf16): finite differences at float32's resolution.
    x = torch.randn(3, 6, requires_grad=True)
    r = torch.randn(3, 6, requires_grad=True)
    w = (1 + torch.randn(6)).requires_grad_()

    def f(x, r, w):
        y, h = fn(x, (6,), w, residual=r)
        return y, h

    assert torch.autograd.gradcheck(f, (x, r, w), eps=1e-3, atol=5e-3, rtol=2e-2)
