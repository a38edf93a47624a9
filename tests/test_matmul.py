"""matmul: every GEMM variant (tiled, split-K, persistent, TMA descriptors, both) matches float64 within the
gate's budget on the sizes that break tiling (1, 7, 33, 65, 129, 4097; K = 1), transposed, sliced, batched
and broadcast operands and large or small values; the public function is torch.matmul, differentiable, and
launches the config stored for its bucket; TMA descriptors are used where the operands allow them; bad
arguments fail before any launch."""

from __future__ import annotations

import pytest
import torch
from stored_rows import store_best

from autotune import gpu, runtime
from autotune.gate.verify import check_problem, verify
from autotune.kernels import matmul
from autotune.kernels.gemm import gemm as _gemm
from autotune.kernels.gemm.matmul import MATMUL, apply_activation, linear
from autotune.kernels.gemm.problems import parse_matmul
from autotune.search_spaces.matmul import SPACE

pytestmark = [
    pytest.mark.usefixtures("user_db"),
    # exp overflows to inf in the activations' tails on purpose; the interpreter's numpy says so.
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]

DTYPES = (torch.float32, torch.float16)
"""What the interpreter runs; bfloat16 tl.dot needs the GPU (see the gpu tests)."""


def config(**overrides) -> dict:
    return SPACE.with_overrides(**overrides)


CONFIGS = {
    "default": dict(SPACE.default),
    "split_k": config(BLOCK_M=128, BLOCK_N=64, BLOCK_K=16, GROUP_M=1, SPLIT_K=4),
    "persistent": config(variant="persistent", BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, GROUP_M=4, num_stages=2),
    "tma": config(variant="tma", BLOCK_M=64, BLOCK_N=64, BLOCK_K=16, GROUP_M=1, SPLIT_K=2),
    "tma_persistent": config(variant="tma_persistent", BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4),
}
"""Each variant with tiles that split the cases below several ways (the interpreter's time goes by programs)."""


def problem(text: str, **kw) -> dict:
    return {**parse_matmul(text), **kw}


# (M x K x N): the sizes, K = 1, transposed and sliced operands, batches with a broadcast operand,
# large and small values. The last has 16-byte aligned rows in both dtypes: the TMA variants read it
# through descriptors (a broadcast 2-D one for a, a batched one of b's transpose).
CASES = [
    problem("1x1x1"),
    problem("7x1x33", a_layout="transposed", values="large"),
    problem("2x65x33x129", broadcast="b", b_layout="transposed", values="small"),
    problem("2x129x7x65", a_layout="transposed", b_layout="sliced", values="large"),
    problem("2x48x40x72", broadcast="a", b_layout="transposed"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("name", CONFIGS)
def test_every_variant_matches_float64_on_the_edge_cases(name, dtype):
    for case in CASES:
        failure = check_problem(MATMUL, CONFIGS[name], case, dtype)
        assert failure is None, failure.describe()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_4097_along_each_dimension(dtype):
    # Long K runs 129 blocks in one program; long M and N many tiles of odd edges.
    wide = config(BLOCK_M=256, BLOCK_N=256, BLOCK_K=32)
    long = problem("4097x7x7") if dtype == torch.float32 else problem("7x7x4097", b_layout="transposed")
    for case, tried in [(problem("7x4097x7", a_layout="transposed"), dict(SPACE.default)), (long, wide)]:
        failure = check_problem(MATMUL, tried, case, dtype)
        assert failure is None, failure.describe()


def test_the_default_passes_the_gate_on_drawn_problems():
    result = verify(MATMUL, SPACE.default, torch.float16, examples=8, seed=3)
    assert result.passed and result.examples == 8, result.failure and result.failure.describe()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_the_gate_catches_a_kernel_that_skips_the_last_block_of_k(dtype):
    # Errors are measured against the typical size of each output's sum (its error floor), not against
    # the leftover of a sum that cancels; a block of 16 missing from 4097 terms is still far outside.
    import dataclasses

    def short_k(inputs, tried, out):
        a, b = inputs["a"], inputs["b"]
        return MATMUL.launch({"a": a[..., :-16], "b": b[..., :-16, :]}, tried, out)

    spec = dataclasses.replace(MATMUL, launch=short_k)
    for case in (problem("9x33x9"), problem("7x4097x7", values="large")):
        assert check_problem(MATMUL, dict(SPACE.default), case, dtype) is None
        failure = check_problem(spec, dict(SPACE.default), case, dtype)
        assert failure is not None and failure.kind == "incorrect"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_matches_torch_for_2d_batched_broadcast_and_strided_operands(dtype):
    torch.manual_seed(0)
    a, b = torch.randn(33, 20).to(dtype), torch.randn(20, 17).to(dtype)
    tol = {} if dtype is torch.float32 else dict(atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(matmul(a, b), a @ b, **tol)
    torch.testing.assert_close(matmul(a.t().contiguous().t(), b[:, :9]), a @ b[:, :9], **tol)
    a3, b3 = torch.randn(3, 33, 20).to(dtype), torch.randn(3, 20, 17).to(dtype)
    for x, y in [
        (a3, b3),
        (a3, b),
        (a, b3),
        (a3[:1], b3),
        (a3.transpose(1, 2).contiguous().transpose(1, 2), b3[:, :, ::2]),
    ]:
        out = matmul(x, y)
        assert out.shape == torch.matmul(x, y).shape and out.is_contiguous()
        torch.testing.assert_close(out, torch.matmul(x, y), **tol)


def test_empty_dims_and_k_zero():
    with runtime.record_launches() as launches:
        assert matmul(torch.randn(0, 5), torch.randn(5, 3)).shape == (0, 3)
        assert matmul(torch.randn(2, 4, 5), torch.randn(2, 5, 0)).shape == (2, 4, 0)
    assert launches == []
    out = matmul(torch.randn(4, 0), torch.randn(0, 3))
    assert torch.equal(out, torch.zeros(4, 3))  # a sum of nothing, written (the output starts unset)


def test_gradients_match_torch_and_reach_a_broadcast_operand():
    a, b = torch.randn(2, 9, 12), torch.randn(12, 7)
    ours = [t.clone().requires_grad_() for t in (a, b)]
    theirs = [t.clone().requires_grad_() for t in (a, b)]
    g = torch.randn(2, 9, 7)
    matmul(*ours).backward(g)
    torch.matmul(*theirs).backward(g)
    for o, t in zip(ours, theirs):
        torch.testing.assert_close(o.grad, t.grad)
    x = torch.randn(3, 4, requires_grad=True)
    with torch.no_grad():
        assert matmul(x, torch.randn(4, 2)).grad_fn is None


def test_descriptors_read_aligned_operands_in_either_orientation_and_refuse_the_rest():
    def read(t: torch.Tensor):
        described = _gemm.describe(t.shape, t.stride(), t.dtype, 32, 16)
        return described and (described.shape, described.block, described.transposed, described.batched)

    rows = torch.randn(1, 48, 40, dtype=torch.float16)
    cols = torch.randn(1, 40, 48, dtype=torch.float16).transpose(1, 2)
    assert read(rows) == ([48, 40], [32, 16], False, False)
    assert read(cols) == ([40, 48], [16, 32], True, False)
    assert read(torch.randn(3, 48, 40)) == ([3, 48, 40], [1, 32, 16], False, True)
    assert read(torch.randn(48, 40).expand(3, 48, 40)) == ([48, 40], [32, 16], False, False)  # broadcast: one matrix
    for refused in (
        torch.randn(1, 48, 80)[:, :, ::2],
        torch.randn(1, 48, 41, dtype=torch.float16),
        torch.randn(1, 48, 41)[:, :, 1:],
        torch.randn(1, 0, 40),
    ):
        assert read(refused) is None


def test_float32_reads_a_b_stored_along_k_from_a_row_major_copy_from_512_rows_on():
    many = _gemm.FMA_ROW_MAJOR_MIN_M

    def copy_of(a: torch.Tensor, b: torch.Tensor):
        return _gemm.plan(a.shape, a.stride(), b.shape, b.stride(), (0, b.shape[2], 1), a.dtype, SPACE.default).b_copy

    w_t = torch.randn(1, 40, 24).transpose(1, 2)  # linear's w.T: (K, N), unit stride down the columns
    assert copy_of(torch.randn(1, many, 24), w_t) == ((1, 24, 40), w_t.stride())
    broadcast = torch.randn(40, 24).t().expand(3, 24, 40)
    assert copy_of(torch.randn(3, many, 24), broadcast) == (
        (1, 24, 40),
        broadcast.stride(),
    )  # one copy, still broadcast
    batched = torch.randn(3, 40, 24).transpose(1, 2)
    assert copy_of(torch.randn(3, many, 24), batched) == ((3, 24, 40), batched.stride())
    for a, kept in [
        (torch.randn(1, many - 1, 24), w_t),
        (torch.randn(1, many, 24).half(), w_t.half()),
        (torch.randn(1, many, 24), torch.randn(1, 24, 40)),
    ]:
        assert copy_of(a, kept) is None  # few rows, a half type, already row-major
    a = torch.randn(3, many, 24)
    torch.testing.assert_close(matmul(a, broadcast).double(), a.double() @ broadcast.double(), rtol=1e-5, atol=1e-5)


def test_linear_in_float32_with_the_row_major_copy_matches_float64():
    x, w, bias = torch.randn(_gemm.FMA_ROW_MAJOR_MIN_M, 24), torch.randn(40, 24), torch.randn(40)
    y = linear(x, w, bias, activation="gelu_tanh")
    want = apply_activation(torch.nn.functional.linear(x.double(), w.double(), bias.double()), "gelu_tanh")
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)


def test_public_calls_launch_the_stored_config_of_their_bucket(user_db):
    stored = config(BLOCK_M=64, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, SPLIT_K=2, num_stages=2)
    assert SPACE.rejects(stored, {"m": 40, "n": 30, "k": 50, "dtype": "fp32"}) is None
    store_best(user_db, MATMUL, "m=64,n=32,k=64,b=1", stored)
    a, b = torch.randn(40, 50), torch.randn(50, 30)
    with runtime.record_launches() as launches:
        y = matmul(a, b)  # exact bucket
        matmul(torch.randn(40, 3), torch.randn(3, 30))  # k=4: splitting 32-blocks of K in two cannot run: default
    torch.testing.assert_close(y, a @ b)
    assert launches == [("matmul", stored), ("matmul", dict(SPACE.default))]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda a, b: matmul(a.int(), b), TypeError, "a must have a floating dtype"),
        (lambda a, b: matmul(a, [1.0]), TypeError, "b must be a torch.Tensor"),
        (lambda a, b: matmul(a, b.double()), TypeError, "b must have a floating dtype"),
        (lambda a, b: matmul(a, b.half()), TypeError, "one dtype"),
        (lambda a, b: matmul(a, torch.randn(4, 3, device="meta")), ValueError, "b must be on"),
        (lambda a, b: matmul(a[0], b), ValueError, "2-D or 3-D"),
        (lambda a, b: matmul(a, b.expand(2, 2, 4, 3)), ValueError, "2-D or 3-D"),
        (lambda a, b: matmul(a, b[:3]), ValueError, r"a's last dim \(4\) must equal b's second-to-last \(3\)"),
        (lambda a, b: matmul(a.expand(2, 5, 4), b.expand(3, 4, 3)), ValueError, "do not broadcast"),
        (lambda a, b: matmul(a.bfloat16(), b.bfloat16()), TypeError, "bfloat16"),
    ],
)
def test_bad_arguments_fail_before_any_launch(call, error, message):
    if "bfloat16" in message and not gpu.interpreter_active():
        pytest.skip("bfloat16 runs on a GPU")
    with runtime.record_launches() as launches, pytest.raises(error, match=message):
        call(torch.randn(5, 4), torch.randn(4, 3))
    assert launches == []


GPU_CONFIGS = {
    "tiled": config(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3),
    "split_k": config(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, SPLIT_K=8, num_stages=4),
    "persistent": config(variant="persistent", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3),
    "tma": config(variant="tma", BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
    "tma_persistent": config(variant="tma_persistent", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4),
}


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32], ids=lambda d: str(d).removeprefix("torch.")
)
@pytest.mark.parametrize("name", GPU_CONFIGS)
def test_every_variant_passes_the_gate_on_the_gpu(name, dtype):
    tried = GPU_CONFIGS[name]
    if dtype == torch.float32:  # IEEE float32 products run on the FMA units: smaller tiles
        tried = {**tried, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4}
    edges = [
        problem("1024x1024x1024"),
        problem("8x1024x4097x1024", b_layout="transposed"),
        problem("4097x7x4097", a_layout="transposed"),
        problem("4x129x65x33", broadcast="a", b_layout="sliced"),
        problem("2048x4096x2048", b_layout="transposed", values="large"),
    ]
    for case in edges:
        failure = check_problem(MATMUL, tried, case, dtype)
        assert failure is None, failure.describe()
    result = verify(MATMUL, tried, dtype, examples=30)
    assert result.failure is None, result.failure.describe()


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_CONFIGS)
def test_float32_stays_in_budget_along_a_long_k_on_the_gpu(name):
    # One chain of K products on the FMA units ran past the budget at these sizes on the H100 (error 1.5e-5
    # against 8.8e-6, 1.24e-5 against 9.4e-6; every variant failed here, 2026-11-24); they now chain 256 at a time.
    tried = {**GPU_CONFIGS[name], "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4}
    for case in [problem("33x22635x1"), problem("7x18503x1", values="large"), problem("5x65537x9", values="large")]:
        failure = check_problem(MATMUL, tried, case, torch.float32)
        assert failure is None, failure.describe()


@pytest.mark.gpu
def test_tma_variants_read_through_descriptors_on_the_gpu():
    a = torch.randn(1, 1024, 1024, device="cuda", dtype=torch.bfloat16)
    assert _gemm.describe(a.shape, a.stride(), a.dtype, 128, 64).at(a).base is a
    at = a.transpose(1, 2)
    assert _gemm.describe(at.shape, at.stride(), at.dtype, 128, 64).transposed
    from autotune.search_spaces.matmul import tma_available

    assert tma_available() == (torch.cuda.get_device_capability() >= (9, 0))
