"""group_norm backward: every variant and weight/bias reduction passes the gate against float64 autograd,
gradients match PyTorch's for x, weight and bias through each activation and layout, the tuned backward
really runs, and a module calling group_norm compiles whole (fullgraph) with the same results."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from autotune import gpu, runtime
from autotune.db import BestRow, ConfigStore
from autotune.gate.verify import check_problem, verify
from autotune.kernels import group_norm
from autotune.kernels.norm.group_norm import _forward
from autotune.kernels.norm.group_norm_backward import SPEC
from autotune.search_spaces.group_norm import BACKWARD_SPACE, SPACE

pytestmark = [
    pytest.mark.usefixtures("user_db"),  # an empty user database: public calls run the default configs
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # masked lanes of the interpreter's numpy
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
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
    return BACKWARD_SPACE.with_overrides(**overrides)


CASES = {
    "default": (
        dict(BACKWARD_SPACE.default),
        [
            problem([2, 6, 1, 1], 3, "channels_last", "mish", values="constant"),
            problem([2, 4, 7, 5], 2, "channels_last", "silu", "weight", "offset", eps=1e-6),
            problem([3, 3, 37], 1, "sliced", "mish", "bias", scale=30.0),
        ],
    ),
    "single_atomic": (
        config(variant="single", BLOCK=64, REDUCE="atomic", num_warps=1, num_stages=1),
        [
            problem([2, 8, 3, 5], 2, "channels_last", "mish", values="constant", scale=30.0),
            problem([3, 6, 13], 2, "contiguous", "silu", "none", "offset"),
        ],
    ),
    "looped_atomic": (
        config(variant="looped", BLOCK=16, REDUCE="atomic", num_warps=1, num_stages=2),
        [
            problem([2, 6, 5, 7], 2, "channels_last", "mish", "weight", scale=30.0),
            problem([2, 3, 41], 1, "permuted", "silu", "bias", "offset"),
        ],
    ),
    "split_partials": (
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
    assert [BACKWARD_SPACE.rejects(cfg, p) for p in edges] == [None] * len(edges)
    result = verify(SPEC, cfg, dtype, examples=2, max_numel=128, seed=1, extra_problems=edges)
    assert result.passed, result.failure and result.failure.describe()


def _grads(fn, x, weight, bias, dy):
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, weight, bias)]
    y = fn(*leaves)
    grads = torch.autograd.grad(y, [t for t in leaves if t is not None], dy)
    return y, grads


@pytest.mark.parametrize(
    "layout, activation",
    [
        ("contiguous", None),
        ("contiguous", "silu"),
        ("contiguous", "mish"),
        ("channels_last", "mish"),
        ("ncl", "silu"),
        ("sliced", None),
    ],
)
def test_gradients_match_torch(layout, activation):
    x = torch.randn(2, 8, 3, 6) * 2 + 0.5
    x = {
        "contiguous": x,
        "channels_last": x.to(memory_format=torch.channels_last),
        "ncl": x.flatten(2),
        "sliced": x[..., ::2],
    }[layout]
    w, b = torch.randn(8), torch.randn(8)
    dy = torch.randn(x.shape)
    ours = _grads(lambda *t: group_norm(t[0], 4, t[1], t[2], activation=activation), x, w, b, dy)
    theirs = _grads(lambda *t: ACT[activation](F.group_norm(t[0], 4, t[1], t[2])), x, w, b, dy)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("affine", ["weight", "bias", "none"])
def test_gradients_with_partial_affine_match_float64(affine):
    # PyTorch's CPU backward fails outright for a bias without a weight; float64 autograd is the reference.
    x, dy = torch.randn(3, 6, 7), torch.randn(3, 6, 7)
    w = torch.randn(6) if affine == "weight" else None
    b = torch.randn(6) if affine == "bias" else None
    ours = _grads(lambda *t: group_norm(t[0], 3, t[1], t[2], activation="mish"), x, w, b, dy)

    def reference(x, w, b):  # the affine step by hand: F.group_norm's own backward is what fails
        z = F.group_norm(x, 3) * (1 if w is None else w[:, None]) + (0 if b is None else b[:, None])
        return F.mish(z)

    ref = _grads(
        reference, x.double(), None if w is None else w.double(), None if b is None else b.double(), dy.double()
    )
    torch.testing.assert_close(ours[0], ref[0].float())
    for got, want in zip(ours[1], ref[1], strict=True):
        torch.testing.assert_close(got, want.float())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_precision_gradients_match_torch(dtype):
    x, dy = torch.randn(2, 8, 4, 4).to(dtype), torch.randn(2, 8, 4, 4).to(dtype)
    w, b = torch.randn(8).to(dtype), torch.randn(8).to(dtype)
    ours = _grads(lambda *t: group_norm(t[0], 2, t[1], t[2], activation="silu"), x, w, b, dy)
    ref = _grads(lambda *t: F.silu(F.group_norm(t[0], 2, t[1], t[2])), x.double(), w.double(), b.double(), dy.double())
    assert all(g.dtype == dtype for g in ours[1])
    for got, want in zip(ours[1], ref[1], strict=True):  # float32 inside, one rounding: about an ulp
        eps = torch.finfo(dtype).eps
        torch.testing.assert_close(got.double(), want, rtol=2 * eps, atol=2 * eps * want.abs().max().item())


def test_constant_groups_have_exact_zero_weight_gradients_and_offsets_keep_precision():
    x = torch.randn(2, 4, 3, 3)
    x[:, :2] = 0.3  # group 0 constant
    x[:, 2:] += 1e4  # group 1 spread 1 around 1e4
    w, b, dy = torch.randn(4), torch.randn(4), torch.randn(2, 4, 3, 3)
    _, (dx, dw, db) = _grads(lambda *t: group_norm(t[0], 2, t[1], t[2], activation="silu"), x, w, b, dy)
    assert torch.equal(dw[:2], torch.zeros(2))  # xhat is exactly 0 in a constant group
    _, ref = _grads(lambda *t: F.silu(F.group_norm(t[0], 2, t[1], t[2])), *(t.double() for t in (x, w, b, dy)))
    # Rounding the mean to float32 (half an ulp of 1e4) would cost dx about 1e-4 relative here.
    assert ((dx[:, 2:].double() - ref[0][:, 2:]).abs().max() / ref[0][:, 2:].abs().max()) < 1e-6


def test_a_gradient_past_half_range_may_round_to_inf():
    # An H100 `db verify` flagged this config on this problem: dx's true value -65524.1 is past float16's
    # largest finite 65504, so the kernel's correctly rounded -inf must pass where PyTorch's finite value does.
    hard = {
        "activation": "none",
        "affine": "both",
        "eps": 1e-06,
        "groups": 1,
        "layout": "contiguous",
        "magnitude": 0.001,
        "scale": 30.0,
        "shape": [3, 3, 2049],
        "values": "random",
    }
    config = BACKWARD_SPACE.validate(
        {"variant": "looped", "BLOCK": 4096, "SPLIT": 1, "num_warps": 16, "num_stages": 3, "REDUCE": "partials"}
    )
    assert check_problem(SPEC, config, hard, torch.float16, seed=391699466) is None


def test_backward_of_a_sum_reads_an_expanded_gradient():
    x = torch.randn(2, 6, 4, 5, requires_grad=True)
    group_norm(x, 3, activation="mish").sum().backward()  # dy is a stride-0 expand
    x2 = x.detach().clone().requires_grad_()
    F.mish(F.group_norm(x2, 3)).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_the_tuned_backward_runs_and_no_graph_without_grad():
    x = torch.randn(2, 8, 3, 3, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    with runtime.record_launches() as launches:
        group_norm(x, 4, w, activation="silu").sum().backward()
    assert launches == [("group_norm", dict(SPACE.default)), ("group_norm_backward", dict(BACKWARD_SPACE.default))]
    assert x.grad is not None and w.grad is not None
    with torch.no_grad():
        assert group_norm(x, 4, w).grad_fn is None
    assert group_norm(x, 4, w).grad_fn is not None


def test_a_planned_backward_serves_gradients_arriving_in_any_layout():
    # The eager backward is planned once per call shape and gradient strides; x stays the same throughout.
    x, w, b = torch.randn(2, 8, 5, 6), torch.randn(8), torch.randn(8)
    dense = torch.randn(x.shape)
    for dy in (
        dense,
        dense.to(memory_format=torch.channels_last),
        dense.transpose(2, 3).contiguous().transpose(2, 3),
        torch.randn(1, 1, 1, 1).expand(x.shape),
        dense,
    ):
        ours = _grads(lambda *t: group_norm(t[0], 4, t[1], t[2], activation="silu"), x, w, b, dy)
        theirs = _grads(lambda *t: F.silu(F.group_norm(t[0], 4, t[1], t[2])), x, w, b, dy)
        torch.testing.assert_close(ours, theirs)


def _store_backward_row(path, bucket, cfg):
    with ConfigStore(str(path)) as store:
        store.record_best(
            BestRow(
                kernel="group_norm_backward",
                source_hash=SPEC.source_hash,
                gpu=gpu.current_gpu().name,
                device_name="test",
                dtype="fp32",
                bucket=bucket,
                config_json=json.dumps(cfg),
                problem_json="{}",
                time_ms=1.0,
                examples_verified=1,
                triton_version="x",
                torch_version="y",
            )
        )


def test_a_backward_planned_once_launches_a_new_row_after_the_database_changes(user_db):
    x, w, dy = torch.randn(2, 8, 5, 5), torch.randn(8), torch.randn(2, 8, 5, 5)
    p = problem(x.shape, 4, activation="none", affine="weight")
    stored = config(variant="split", BLOCK=16, SPLIT=2, num_warps=1, num_stages=1)
    assert BACKWARD_SPACE.rejects(stored, p) is None
    theirs = _grads(lambda *t: F.group_norm(t[0], 4, t[1]), x, w, None, dy)
    with runtime.record_launches() as launches:
        first = _grads(lambda *t: group_norm(t[0], 4, t[1]), x, w, None, dy)  # plans the default config
        _store_backward_row(user_db, SPEC.bucket(p), stored)
        runtime.clear_cache()
        second = _grads(lambda *t: group_norm(t[0], 4, t[1]), x, w, None, dy)
    backward_launches = [cfg for kernel, cfg in launches if kernel == "group_norm_backward"]
    assert backward_launches == [dict(BACKWARD_SPACE.default), stored]
    torch.testing.assert_close(first, theirs)
    torch.testing.assert_close(second, theirs)


def test_empty_input_gives_empty_and_zero_gradients():
    x = torch.randn(0, 4, 3, requires_grad=True)
    w, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    group_norm(x, 2, w, b).sum().backward()
    assert x.grad.shape == x.shape and torch.equal(w.grad, torch.zeros(4)) and torch.equal(b.grad, torch.zeros(4))


def test_atomic_and_partial_reductions_agree():
    x, dy = torch.randn(3, 4, 4, 4), torch.randn(3, 4, 4, 4)
    w, b = torch.randn(4), torch.randn(4)
    _, mean, rstd = _forward(x, w, b, 2, 1e-5, "mish")
    results = []
    for reduce in ("partials", "atomic"):
        out = (torch.full_like(x, float("nan")), torch.full_like(w, float("nan")), torch.full_like(b, float("nan")))
        inputs = {
            "dy": dy,
            "x": x,
            "weight": w,
            "bias": b,
            "mean": mean,
            "rstd": rstd,
            "groups": 2,
            "activation": "mish",
        }
        results.append(SPEC.launch(inputs, config(variant="split", BLOCK=16, SPLIT=2, num_warps=1, REDUCE=reduce), out))
    torch.testing.assert_close(results[0], results[1])


def test_backward_space_adds_the_reduction_and_shares_the_bucket():
    p = problem([8, 512, 64, 64], 32)
    assert SPEC.bucket(p) == "ng=256,cg=16,hw=4096,cl=0"
    single = dict(variant="single", BLOCK=65536, num_stages=1)  # x and dy together need twice the threads
    assert "elements per thread" in BACKWARD_SPACE.rejects(config(**single, num_warps=16), p)
    assert SPACE.rejects(SPACE.with_overrides(**single, num_warps=16), p) is None
    assert BACKWARD_SPACE.rejects(config(**single, num_warps=32, REDUCE="atomic"), p) is None
    c = SPEC.cost(p, torch.bfloat16)
    assert c.bytes == 3 * 8 * 512 * 64 * 64 * 2 + 2 * 2 * 512 * 2 + 12 * 8 * 32


def test_ops_pass_torch_library_checks():
    x = torch.randn(2, 4, 2, 3, requires_grad=True)
    w, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    torch.library.opcheck(torch.ops.autotune.group_norm_forward.default, (x, w, b, 2, 1e-5, "silu"))
    _, mean, rstd = _forward(x.detach(), w.detach(), None, 2, 1e-5, "mish")
    torch.library.opcheck(
        torch.ops.autotune.group_norm_backward.default,
        (torch.randn(2, 4, 2, 3), x.detach(), w.detach(), None, mean, rstd, 2, "mish"),
    )


class _Block(torch.nn.Module):
    """A residual block around group_norm + silu (the diffusion U-Net pattern), with PyTorch ops on both
    sides for the compiler to fuse."""

    def __init__(self, norm):
        super().__init__()
        self.norm = torch.nn.GroupNorm(4, 8)
        torch.nn.init.normal_(self.norm.weight)
        torch.nn.init.normal_(self.norm.bias)
        self.use = norm

    def forward(self, x):
        h = self.use(x * 2.0 + 1.0, 4, self.norm.weight, self.norm.bias, self.norm.eps)
        return h * x


def test_a_module_compiles_whole_and_matches_eager_torch():
    torch.manual_seed(0)
    ours = _Block(lambda h, g, w, b, eps: group_norm(h, g, w, b, eps, activation="silu"))
    eager = _Block(lambda h, g, w, b, eps: F.silu(F.group_norm(h, g, w, b, eps)))
    eager.load_state_dict(ours.state_dict())
    compiled = torch.compile(ours, fullgraph=True)  # the default inductor backend: it builds in seconds here
    for _ in range(2):  # the second call reuses the compiled graphs
        x = torch.randn(2, 8, 5, 5)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        with runtime.record_launches() as launches:
            y1 = compiled(x1)
            y1.square().sum().backward()
        assert [name for name, _ in launches] == ["group_norm", "group_norm_backward"]  # ours ran, inside the graph
        y2 = eager(x2)
        y2.square().sum().backward()
        torch.testing.assert_close(y1, y2)
        torch.testing.assert_close(x1.grad, x2.grad)
        for (name, p1), p2 in zip(ours.named_parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p1.grad, p2.grad, msg=name)
        ours.zero_grad()
        eager.zero_grad()
