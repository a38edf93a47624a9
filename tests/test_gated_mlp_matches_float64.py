"""gated_mlp's forward: the one-GEMM gate and up projections with act(g) * u in the epilogue, then the down
projection, match float64 within the gate's budget in every variant (tiled, persistent, each through pointers or
descriptors), every activation, with and without biases, on sizes of 1, primes, sizes off every block, empty dims,
strided and packed weights; the public function is torch's down(act(gate(x)) * up(x)); a stored config is the one
launched; bad arguments fail before any launch."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from stored_rows import store_best

from autotune import runtime
from autotune.gate.verify import check_problem, verify
from autotune.kernels import gated_mlp
from autotune.kernels.gemm import gated as _gated
from autotune.kernels.gemm import gated_problems as problems_
from autotune.kernels.gemm.gated_mlp import GATED_MLP
from autotune.search_spaces.gated_mlp import SPACE

pytestmark = [pytest.mark.usefixtures("user_db"), pytest.mark.filterwarnings("ignore::RuntimeWarning")]

DTYPES = (torch.float32, torch.float16)
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu", None)
TORCH_ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
    None: lambda t: t,
}

CONFIGS = {
    "default": dict(SPACE.default),
    "tma": SPACE.with_overrides(
        variant="tma", BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, num_warps=2, num_stages=2
    ),
    "persistent": SPACE.with_overrides(
        variant="persistent", BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=4, num_warps=2
    ),
    "tma_persistent": SPACE.with_overrides(
        variant="tma_persistent", BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=1, num_warps=2, num_stages=2
    ),
}


def gated(text: str, **kw) -> dict:
    return {**problems_.parse_gated(text), **kw}


# Every activation with and without biases; sizes of 1, primes and one past a power of two; x and the weights
# transposed and sliced (no unit stride); leading dims; large values (the gate deep in its activation's tails)
# and small ones. The last has 16-byte aligned rows, so the descriptor variants read it through descriptors.
CASES = [
    gated("33x65x7x24", values="large"),
    gated("2x40x71x9,bias,relu", x_layout="transposed", w_layout="sliced"),
    gated("24x9x48x40,bias,gelu", lead=[4, 6], w_layout="transposed", values="small"),
    gated("7x1x33x1,gelu_tanh", values="large"),
    gated("1x17x1x5,none"),
    gated("48x32x64x16,bias"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("name", CONFIGS)
def test_every_variant_matches_float64(name, dtype):
    for case in CASES:
        failure = check_problem(GATED_MLP, CONFIGS[name], case, dtype)
        assert failure is None, failure.describe()


class KernelSpy:
    """Stands in for a @triton.jit kernel: launches it, recording each launch's keyword arguments."""

    def __init__(self, kernel) -> None:
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append(kwargs)
            return self.kernel[grid](*args, **kwargs)

        return launch


def test_descriptor_variants_read_aligned_operands_through_descriptors(monkeypatch):
    spy = KernelSpy(_gated._gated_kernel)
    monkeypatch.setattr(_gated, "_gated_kernel", spy)
    for name in ("tma", "tma_persistent", "default"):
        assert check_problem(GATED_MLP, CONFIGS[name], CASES[-1], torch.float16) is None
    assert [(kw["TMA"], kw["PERSISTENT"]) for kw in spy.launches] == [(True, False), (True, True), (False, False)]


def test_float32_from_512_rows_multiplies_row_major_copies_of_the_weights():
    case = gated("513x17x20x3,bias,gelu", values="large")
    for config in (CONFIGS["default"], CONFIGS["tma"]):
        launch = _gated.plan(
            513,
            17,
            20,
            (17, 1),
            (17, 1),
            (17, 1),
            (20, 1),
            torch.float32,
            config,
            gate_bias=True,
            up_bias=True,
            store_gu=False,
            activation="gelu",
        )
        assert launch.copies_weights and launch.args[-6:-2] == (20, 1, 20, 1)
        assert check_problem(GATED_MLP, config, case, torch.float32) is None


def test_drawn_problems_pass_the_gate():
    for config, dtype in ((CONFIGS["default"], torch.float32), (CONFIGS["tma"], torch.float16)):
        result = verify(GATED_MLP, config, dtype, examples=6, seed=3)
        assert result.passed, result.failure and result.failure.describe()


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gated_mlp_is_down_of_act_gate_times_up(activation):
    torch.manual_seed(0)
    x, wg, wu, wd = torch.randn(3, 4, 20), torch.randn(36, 20) / 4, torch.randn(36, 20) / 4, torch.randn(12, 36) / 6
    bg, bu, bd = torch.randn(36), torch.randn(36), torch.randn(12)
    act = TORCH_ACTIVATIONS[activation]
    expect = F.linear(act(F.linear(x, wg, bg)) * F.linear(x, wu, bu), wd, bd)
    got = gated_mlp(x, wg, wu, wd, activation, b_gate=bg, b_up=bu, b_down=bd)
    torch.testing.assert_close(got, expect, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(  # a 1-D x, no biases
        gated_mlp(x[0, 0], wg, wu, wd, activation),
        F.linear(act(F.linear(x[0, 0], wg)) * F.linear(x[0, 0], wu), wd),
        atol=1e-5,
        rtol=1e-5,
    )


@pytest.mark.parametrize("m, k, h, n", [(3, 0, 5, 4), (0, 6, 5, 4), (3, 6, 0, 4), (3, 6, 5, 0), (1, 1, 1, 1)])
def test_sizes_of_one_and_empty_dims_give_torchs_result(m, k, h, n):
    torch.manual_seed(1)
    x, wg, wu, wd = torch.randn(m, k), torch.randn(h, k), torch.randn(h, k), torch.randn(n, h)
    bg, bu, bd = torch.randn(h), torch.randn(h), torch.randn(n)
    expect = F.linear(F.silu(F.linear(x, wg, bg)) * F.linear(x, wu, bu), wd, bd)
    got = gated_mlp(x, wg, wu, wd, b_gate=bg, b_up=bu, b_down=bd)
    assert got.shape == (m, n)
    torch.testing.assert_close(got, expect, atol=1e-5, rtol=1e-5)


def test_a_packed_gate_up_weight_is_read_through_its_two_halves():
    torch.manual_seed(2)
    x, packed, wd = torch.randn(9, 16), torch.randn(2 * 24, 16) / 4, torch.randn(8, 24) / 5
    wg, wu = packed[:24], packed[24:]
    expect = F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)
    torch.testing.assert_close(gated_mlp(x, wg, wu, wd), expect, atol=1e-5, rtol=1e-5)


def test_the_stored_config_is_the_one_launched(user_db):
    stored = SPACE.with_overrides(
        variant="tma", BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, num_warps=2, num_stages=2
    )
    store_best(user_db, GATED_MLP, "m=32,k=32,h=64,n=16", stored)
    x, wg, wu, wd = torch.randn(30, 20), torch.randn(40, 20), torch.randn(40, 20), torch.randn(12, 40)
    with runtime.record_launches() as launches:
        y = gated_mlp(x, wg, wu, wd, "gelu_tanh")
    torch.testing.assert_close(
        y, F.linear(F.gelu(F.linear(x, wg), approximate="tanh") * F.linear(x, wu), wd), atol=1e-4, rtol=1e-4
    )
    assert launches[0] == ("gated_mlp", stored) and [name for name, _ in launches] == ["gated_mlp", "linear"]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x, w, d: gated_mlp(x, w, w, d, "tanh"), ValueError, "activation must be None or one of"),
        (lambda x, w, d: gated_mlp(x, w, w, d, 1), TypeError, "activation must be None or a string"),
        (lambda x, w, d: gated_mlp(x, w[:, :3], w, d), ValueError, r"w_gate must have shape \(6, 4\)"),
        (lambda x, w, d: gated_mlp(x, w, w[:5], d), ValueError, r"w_up must have shape \(6, 4\)"),
        (lambda x, w, d: gated_mlp(x, w, w, d[:, :5]), ValueError, r"w_down must have shape \(3, 6\)"),
        (lambda x, w, d: gated_mlp(x, w, w[0], d), ValueError, "w_up must be a 2-D tensor"),
        (lambda x, w, d: gated_mlp(x, w, w, "d"), ValueError, "w_down must be a 2-D tensor, got str"),
        (lambda x, w, d: gated_mlp(x, w, w, d, b_gate=torch.ones(3)), ValueError, r"b_gate must have shape \(6,\)"),
        (lambda x, w, d: gated_mlp(x, w, w, d, b_down=torch.ones(6)), ValueError, r"b_down must have shape \(3,\)"),
        (lambda x, w, d: gated_mlp(x, w, w.half(), d), TypeError, "one dtype"),
        (lambda x, w, d: gated_mlp(x.int(), w, w, d), TypeError, "x must have a floating dtype"),
        (lambda x, w, d: gated_mlp(x[0, 0, 0], w, w, d), ValueError, "at least one dim"),
    ],
)
def test_bad_arguments_fail_before_any_launch(call, error, message):
    with runtime.record_launches() as launches, pytest.raises(error, match=message):
        call(torch.randn(2, 3, 4), torch.randn(6, 4), torch.randn(3, 6))
    assert launches == []
