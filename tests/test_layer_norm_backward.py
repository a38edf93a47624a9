"""Backward of layer_norm and rms_norm: both reductions of the parameter gradients pass the gate against
float64 autograd, in one block and in chunks; autograd through the public functions gives torch's
gradients for x, weight, bias and residual; the stored backward config is the one launched; and a model
calling the norms compiles with torch.compile(fullgraph=True) and trains like eager torch."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from stored_rows import store_best

from autotune import runtime
from autotune.gate.compare import compare_outputs, outputs_like
from autotune.gate.verify import verify
from autotune.kernels import layer_norm, rms_norm
from autotune.kernels.norm import problems as _norm_problems
from autotune.kernels.norm.layer_norm_backward import LAYER_NORM_BACKWARD, RMS_NORM_BACKWARD
from autotune.search_spaces.layer_norm import BACKWARD_SPACE as SPACE
from autotune.search_spaces.layer_norm import FORWARD_SPACE

pytestmark = [
    pytest.mark.usefixtures("user_db"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight"),
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SPECS = {"layer_norm_backward": LAYER_NORM_BACKWARD, "rms_norm_backward": RMS_NORM_BACKWARD}


def problem(shape, *, rms=False, **kw):
    return _norm_problems.problem(shape, rms=rms, **kw)


def config(**overrides):
    return SPACE.with_overrides(**overrides)


PARTIALS_64 = config(BLOCK_N=64, READS=2, PROGRAMS_PER_SM=4, num_warps=2, num_stages=1)
PARTIALS_64_ONE_READ = config(BLOCK_N=64, READS=1, PROGRAMS_PER_SM=2, num_warps=2, num_stages=2)
ATOMIC_64 = config(variant="atomic", BLOCK_N=64, READS=1, PROGRAMS_PER_SM=1, num_warps=1, num_stages=3)
CONFIGS = {
    "default": dict(SPACE.default),
    "partials_64": PARTIALS_64,
    "partials_64_one_read": PARTIALS_64_ONE_READ,
    "atomic_64": ATOMIC_64,
}
# Rows of 33..64 for the one-block configs; the default takes any row: one masked block up to 1024,
# chunks past it. Constant rows, rows around 1e4, many rows per program, strided layouts, the gradient
# of the residual sum, no or fp32 parameters.
EDGE = {
    "default": [
        problem([3, 1]),
        problem([2, 1500], residual=True, values="offset", layout="padded"),
        problem([4, 7, 5], norm_dims=2, values="constant", weight=False, layout="strided"),
    ],
    "partials_64": [
        problem([37, 50], residual=True, values="constant", fp32_params=True),
        problem([9, 2, 20], norm_dims=2, values="offset", bias=False, layout="strided", eps=0.1),
    ],
    "partials_64_one_read": [
        problem([40, 64], residual=True, values="offset", layout="padded"),
        problem([7, 3, 11], norm_dims=2, values="constant", fp32_params=True),
    ],
    "atomic_64": [
        problem([21, 64], residual=True, layout="padded", magnitude=1e4),
        problem([5, 33], weight=False, fp32_params=True),
    ],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("kernel", SPECS)
def test_configs_pass_the_gate(kernel, name, dtype):
    rms = kernel.startswith("rms")
    edges = [
        {**p, "bias": p["bias"] and not rms, "eps": None if rms and p["eps"] == 1e-5 else p["eps"]} for p in EDGE[name]
    ]
    assert [SPACE.rejects(CONFIGS[name], p) for p in edges] == [None] * len(edges)
    result = verify(SPECS[kernel], CONFIGS[name], dtype, examples=6, max_numel=96, seed=1, extra_problems=edges)
    assert result.passed and result.examples >= len(edges), result.failure and result.failure.describe()


@pytest.mark.parametrize("variant", ["partials", "atomic"])
@pytest.mark.parametrize("kernel", SPECS)
def test_rows_wider_than_any_block_go_in_chunks(kernel, variant):
    rms = kernel.startswith("rms")
    wide = problem([2, 65537], rms=rms, residual=True, fp32_params=True)
    chunked = config(variant=variant, BLOCK_N=4096, PROGRAMS_PER_SM=1, num_warps=8)
    assert SPACE.rejects(chunked, wide) is None
    spec = SPECS[kernel]
    inputs = spec.make_inputs(wide, torch.float32, torch.device("cpu"), 0)
    base, ref = spec.baseline(inputs), spec.reference(inputs)
    out = outputs_like(base)
    spec.launch(inputs, chunked, out)
    err, budget, reason = compare_outputs(out, ref, base)
    assert reason is None, reason


def test_one_read_is_only_for_rows_that_fit_one_block():
    one_read = config(BLOCK_N=4096, READS=1, PROGRAMS_PER_SM=1, num_warps=8)
    wide = problem([2, 65537], residual=True)
    assert "READS=1" in SPACE.rejects(one_read, wide)
    assert SPACE.rejects(one_read, problem([2, 4000])) is None
    inputs = LAYER_NORM_BACKWARD.make_inputs(wide, torch.float32, torch.device("cpu"), 0)
    with pytest.raises(ValueError, match="READS=1 needs the row in one block"):
        LAYER_NORM_BACKWARD.launch(inputs, one_read, outputs_like(LAYER_NORM_BACKWARD.baseline(inputs)))


def test_the_gate_catches_gradients_that_miss_a_row():
    def drops_a_row(inputs, config, out):  # as if the last row's dy were never read
        inputs = {**inputs, "dy": inputs["dy"].clone()}
        inputs["dy"].view(-1, inputs["dy"].shape[-1])[-1] = 0
        return LAYER_NORM_BACKWARD.launch(inputs, config, out)

    spec = dataclasses.replace(LAYER_NORM_BACKWARD, launch=drops_a_row)
    result = verify(spec, dict(SPACE.default), torch.float32, examples=0, extra_problems=[problem([6, 40])])
    assert not result.passed and "output 0" in result.failure.reason


def _grads(fn, tensors, cotangents):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(
        [o for o, g in zip(outs, cotangents) if g is not None], [g for g in cotangents if g is not None]
    )
    return [t.grad for t in leaves]


@pytest.mark.parametrize("use_sum", [True, False], ids=["h-used", "h-unused"])
def test_layer_norm_gradients_match_torch(use_sum):
    x, r = torch.randn(6, 3, 40), torch.randn(6, 3, 40)
    w, b = torch.randn(3, 40), torch.randn(3, 40)
    dy, dh = torch.randn(6, 3, 40), (torch.randn(6, 3, 40) if use_sum else None)
    ours = _grads(lambda x, r, w, b: layer_norm(x, (3, 40), w, b, eps=1e-4, residual=r), (x, r, w, b), (dy, dh))
    theirs = _grads(lambda x, r, w, b: (F.layer_norm(x + r, (3, 40), w, b, eps=1e-4), x + r), (x, r, w, b), (dy, dh))
    for a, e in zip(ours, theirs):
        torch.testing.assert_close(a, e)
    torch.testing.assert_close(ours[0], ours[1])  # the residual gets the sum's gradient, as x does


def test_rms_norm_gradients_match_torch_and_absent_parameters_get_none():
    x, r, w = torch.randn(7, 33), torch.randn(7, 33), torch.randn(33)
    dy, dh = torch.randn(7, 33), torch.randn(7, 33)
    ours = _grads(lambda x, r, w: rms_norm(x, 33, w, residual=r), (x, r, w), (dy, dh))
    theirs = _grads(lambda x, r, w: (F.rms_norm(x + r, [33], w), x + r), (x, r, w), (dy, dh))
    for a, e in zip(ours, theirs):
        torch.testing.assert_close(a, e)
    x = torch.randn(4, 9, requires_grad=True)
    b = torch.randn(9, requires_grad=True)
    layer_norm(x, 9, None, b).pow(2).sum().backward()
    expect_x, expect_b = torch.autograd.grad(F.layer_norm(x, (9,), None, b).pow(2).sum(), (x, b))
    torch.testing.assert_close(x.grad, expect_x)
    torch.testing.assert_close(b.grad, expect_b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_gradients_are_as_close_to_float64_as_torchs(dtype):
    x, w, b = torch.randn(16, 200), torch.randn(200), torch.randn(200)
    dy = torch.randn(16, 200)
    exact = _grads(lambda x, w, b: F.layer_norm(x, (200,), w, b), [t.double() for t in (x, w, b)], (dy.double(),))
    ours = _grads(lambda x, w, b: layer_norm(x, 200, w, b), [t.to(dtype) for t in (x, w, b)], (dy.to(dtype),))
    theirs = _grads(lambda x, w, b: F.layer_norm(x, (200,), w, b), [t.to(dtype) for t in (x, w, b)], (dy.to(dtype),))
    for o, t, e in zip(ours, theirs, exact):
        assert o.dtype == dtype
        assert (o.double() - e).abs().max() <= 2 * (t.double() - e).abs().max() + 1e-3


def test_gradients_of_strided_inputs_match_torch():
    # Strided inputs go through the custom op in eager mode too (contiguous ones skip its dispatch).
    def ours(bx, br, w, b):
        return layer_norm(bx[..., ::2], (2, 30), w, b, residual=br.transpose(1, 2))

    def theirs(bx, br, w, b):
        h = bx[..., ::2] + br.transpose(1, 2)
        return F.layer_norm(h, (2, 30), w, b), h

    inputs = (torch.randn(5, 2, 60), torch.randn(5, 30, 2), torch.randn(2, 30), torch.randn(2, 30))
    cotangents = (torch.randn(5, 2, 30), torch.randn(5, 2, 30))
    for a, e in zip(_grads(ours, inputs, cotangents), _grads(theirs, inputs, cotangents)):
        torch.testing.assert_close(a, e)


def test_outputs_of_a_differentiable_call_can_be_changed_in_place():
    x, r, w = torch.randn(4, 24), torch.randn(4, 24), torch.randn(24)

    def block(norm, x, r, w):
        y, h = norm(x, r, w)
        y.mul_(3)  # neither output is a view made inside an autograd.Function, so this is allowed
        return y.sum() + (h * h).sum()

    ours = _grads(
        lambda x, r, w: block(lambda x, r, w: rms_norm(x, 24, w, residual=r), x, r, w), (x, r, w), (torch.tensor(1.0),)
    )
    theirs = _grads(
        lambda x, r, w: block(lambda x, r, w: (F.rms_norm(x + r, [24], w), x + r), x, r, w),
        (x, r, w),
        (torch.tensor(1.0),),
    )
    for a, e in zip(ours, theirs):
        torch.testing.assert_close(a, e)


def test_no_graph_without_grad_and_no_grad_for_inputs_that_do_not_need_it():
    x = torch.randn(3, 8, requires_grad=True)
    with torch.no_grad():
        assert layer_norm(x, 8).grad_fn is None
    w = torch.randn(8, requires_grad=True)
    layer_norm(torch.randn(3, 8), 8, w).sum().backward()  # only the weight needs a gradient
    assert w.grad is not None and w.grad.shape == (8,)


def test_backward_launches_the_stored_config_of_its_bucket(user_db):
    stored = config(variant="atomic", BLOCK_N=64, PROGRAMS_PER_SM=2, num_warps=2, num_stages=1)
    store_best(user_db, LAYER_NORM_BACKWARD, "m=8,n=64,res=1", stored)
    x, r, w = (
        torch.randn(5, 50, requires_grad=True),
        torch.randn(5, 50, requires_grad=True),
        torch.randn(50, requires_grad=True),
    )
    with runtime.record_launches() as launches:
        y, h = layer_norm(x, 50, w, residual=r)
        (y.sum() + h.pow(2).sum()).backward()
    assert launches == [("layer_norm", dict(FORWARD_SPACE.default)), ("layer_norm_backward", stored)]
    expect = _grads(
        lambda x, r, w: (F.layer_norm(x + r, (50,), w), x + r), (x, r, w), (torch.ones(5, 50), 2 * (x + r).detach())
    )
    for got, e in zip((x.grad, r.grad, w.grad), expect):
        torch.testing.assert_close(got, e)


@pytest.mark.parametrize(
    "overrides, n, reason",
    [
        (dict(variant="atomic", BLOCK_N=128), 64, "only masked lanes"),
        (dict(BLOCK_N=256), 1000, "BLOCK_N must be 1024"),
        (dict(BLOCK_N=16384, num_warps=8), 16384, "elements per thread"),
        (dict(BLOCK_N=64, num_warps=4), 64, "idle warps"),
    ],
)
def test_constraints_reject_backward_configs_that_should_not_run(overrides, n, reason):
    assert reason in (SPACE.rejects(config(**overrides), problem([64, n])) or "")


def test_backward_space_keeps_one_block_rows_and_chunks_only_wide_ones():
    assert SPACE.rejects(config(BLOCK_N=4096, num_warps=8), problem([8192, 4096])) is None
    assert (
        SPACE.rejects(config(BLOCK_N=8192, num_warps=16, variant="atomic"), problem([16384, 8192], residual=True))
        is None
    )
    assert SPACE.rejects(config(BLOCK_N=8192, num_warps=16), problem([4, 100000])) is None  # chunks of a wide row
    for n in (1, 300, 4096, 65537, 300000):
        assert SPACE.rejects(dict(SPACE.default), problem([3, n])) is None


class _Block(torch.nn.Module):
    """A pre-norm residual block: h = x + residual; layer_norm(h); a linear; rms_norm with the next residual."""

    def __init__(self, n: int):
        super().__init__()
        self.ln_w, self.ln_b = torch.nn.Parameter(torch.randn(n)), torch.nn.Parameter(torch.randn(n))
        self.rms_w = torch.nn.Parameter(torch.randn(n))
        self.proj = torch.nn.Linear(n, n)

    def forward(self, x, residual, ours: bool = True):
        n = x.shape[-1]
        if ours:
            y, h = layer_norm(x, (n,), self.ln_w, self.ln_b, residual=residual)
            z, h2 = rms_norm(self.proj(y), n, self.rms_w, residual=h)
        else:
            h = x + residual
            y = F.layer_norm(h, (n,), self.ln_w, self.ln_b)
            h2 = self.proj(y) + h
            z = F.rms_norm(h2, (n,), self.rms_w)
        return (z * h2).sum()


@pytest.mark.usefixtures("no_autograd_cache")
def test_torch_compile_fullgraph_matches_eager_torch_forward_and_backward():
    torch.manual_seed(0)
    block = _Block(48)
    x, r = torch.randn(2, 5, 48), torch.randn(2, 5, 48)

    def run(fn):
        block.zero_grad()
        xs, rs = x.clone().requires_grad_(), r.clone().requires_grad_()
        loss = fn(xs, rs)
        loss.backward()
        return [loss.detach(), xs.grad, rs.grad] + [p.grad.clone() for p in block.parameters()]

    compiled = torch.compile(block, fullgraph=True)  # the default backend, inductor, compiles on CPU here
    with runtime.record_launches() as launches:
        got = run(compiled)
    expect = run(lambda a, b: block(a, b, ours=False))
    for g, e in zip(got, expect):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
    # The compiled graph calls the tuned kernels, forward and backward.
    assert [name for name, _ in launches] == ["layer_norm", "rms_norm", "rms_norm_backward", "layer_norm_backward"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("kernel", SPECS)
def test_both_reductions_verify_on_the_gpu_at_the_preset_shapes(kernel, dtype):
    spec = SPECS[kernel]
    for preset in spec.presets:
        for variant in ("partials", "atomic"):
            tried = config(variant=variant, BLOCK_N=preset["shape"][-1], PROGRAMS_PER_SM=2, num_warps=16, num_stages=2)
            result = verify(spec, tried, dtype, examples=20, extra_problems=spec.edges_for(preset))
            assert result.passed, result.failure and result.failure.describe()
