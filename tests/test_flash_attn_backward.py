"""flash_attn backward: dq, dk, dv from the saved log-sum-exp pass the gate against float64 on the correctness
cases, in fp32, fp16 and bf16, for both ways of getting dq (a query-side kernel, atomics) and both deltas
(from the output, recomputed); where softmax rows saturate only the recomputed delta keeps up with torch;
autograd through flash_attn gives sdpa's gradients (GQA heads summed), in eager calls without the custom op's
dispatch (the op's own gradients), with fake tensors through it; and a model calling flash_attn
compiles with torch.compile(fullgraph=True) and trains like eager torch."""

from __future__ import annotations

import attention_checks
import pytest
import torch
import torch.nn.functional as F
from dispatched_ops import DispatchedOps, autotune_ops
from torch._subclasses.fake_tensor import FakeTensorMode

from autotune import runtime
from autotune.gate.compare import compare, outputs_like
from autotune.gate.verify import ReferenceCache, check_problem, verify
from autotune.kernels import flash_attn
from autotune.kernels.attention import problems as problems_
from autotune.kernels.attention.flash_attn_backward import SPEC
from autotune.search_spaces.flash_attn import BACKWARD_SPACE as SPACE

pytestmark = [pytest.mark.usefixtures("user_db"), pytest.mark.filterwarnings("ignore::RuntimeWarning")]

DTYPES = attention_checks.DTYPES
problem = problems_.problem

CASES = {
    "N=1": problem(1, 2, 1, 32),
    "ragged N": problem(1, 2, 37, 64),
    "decode, Nk=1000": problem(1, 1, 1, 32, nk=1000),
    "causal Nq<Nk": problem(1, 2, 19, 32, nk=45, causal=True),
    "causal Nq>Nk": problem(1, 2, 45, 32, nk=19, causal=True, layout="bnhd"),
    "large logits": problem(1, 2, 33, 32, nk=40, magnitude=problems_.BACKWARD_LARGE, causal=True),
    "custom scale": problem(1, 2, 20, 80, nk=30, scale=0.3, layout="padded"),
    "GQA": problem(1, 4, 21, 32, kv_heads=2, nk=29, causal=True),
}


config = SPACE.with_overrides


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("case", CASES)
def test_default_passes_the_gate_on_the_correctness_cases(case, dtype):
    attention_checks.assert_passes(SPEC, dict(SPACE.default), [CASES[case]], [dtype])


def test_every_head_dim_passes_the_gate():
    every_dim = [problem(1, 1, 17, d, nk=23, causal=True) for d in problems_.HEAD_DIMS]
    attention_checks.assert_passes(SPEC, dict(SPACE.default), every_dim, (torch.float32, torch.float16))


VARIANTS = {
    "atomic dq": (
        config(dq="atomic", BLOCK_M=16, BLOCK_N=32, num_warps=2),
        [CASES["causal Nq>Nk"], CASES["GQA"], CASES["large logits"]],
    ),
    "dS rounded": (
        config(ds="rounded", BLOCK_M=32, BLOCK_N=16, num_warps=2),
        [CASES["causal Nq<Nk"], CASES["GQA"], CASES["large logits"]],
    ),
    "large tiles": (
        config(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=3, dq="atomic"),
        [problem(1, 4, 70, 32, kv_heads=1, nk=130, causal=True)],
    ),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_pass_the_gate(variant):
    attention_checks.assert_passes(SPEC, *VARIANTS[variant])


def test_delta_from_the_output_is_a_float32_variant():
    # Rounded to a half dtype, the output's delta errs where a row's cancellation leaves dQ small, so the space
    # refuses it there (tests/test_the_outputs_delta_is_refused_for_half_inputs.py); from float32 it passes.
    output = config(delta="output", BLOCK_M=32, BLOCK_N=16, num_warps=2)
    cases = [CASES["causal Nq<Nk"], CASES["custom scale"], CASES["GQA"]]
    attention_checks.assert_passes(SPEC, output, [{**c, "dtype": "fp32"} for c in cases], [torch.float32])
    assert all(SPACE.rejects(output, {**c, "dtype": half}) for c in cases for half in ("bf16", "fp16"))


def test_only_the_recomputed_delta_keeps_up_where_softmax_rows_saturate():
    # Logits with a spread of ~64: three of these four rows put all but 3e-7 or less on one key, so
    # dP - delta is tiny there. delta from the output inherits O's bfloat16 rounding, an error of dP's
    # size / 2**9; torch's CPU backward (the baseline here) does not, and neither does the recomputed delta.
    saturated = problem(2, 2, 1, 16, kv_heads=1, nk=509, magnitude=8.0)
    blocks = dict(BLOCK_M=128, BLOCK_N=128, num_warps=8)
    output, recomputed = config(delta="output", **blocks), config(delta="recomputed", **blocks)
    assert SPACE.rejects(output, {**saturated, "dtype": "bf16"}).startswith("delta=output is refused")  # for:
    failure = check_problem(SPEC, output, saturated, torch.bfloat16)
    assert failure is not None and "output 0" in failure.reason, failure
    assert check_problem(SPEC, recomputed, saturated, torch.bfloat16) is None


@pytest.mark.parametrize("dq", ["separate", "atomic"])
def test_split_ds_keeps_the_gradient_of_a_long_cancelling_sum(dq):
    # One query over 1021 keys of tiny logits (dQ), and 1021 queries over 3 keys (dK): each row's dS sums
    # to 0 and its gradient is what is left of a long sum of them. dS rounded to bfloat16 leaves that
    # sum its rounding errors: 0.176 in dQ, where the H100's sdpa errs 0.026 (the gate's budget 0.112).
    cases = {0: problem(3, 1, 1, 8, nk=1021, magnitude=0.01), 1: problem(3, 1, 1021, 8, nk=3, magnitude=0.01)}
    for output, case in cases.items():
        inputs, base, ref = ReferenceCache().get(SPEC, case, torch.bfloat16, 1)
        errors = {}
        for ds in ("rounded", "split"):
            out = outputs_like(base)
            SPEC.launch(inputs, config(ds=ds, dq=dq, BLOCK_M=32, BLOCK_N=64, num_warps=4), out)
            errors[ds] = compare(out[output], ref[output], ref[output], torch.bfloat16)[0]
        assert errors["split"] < 0.01 < errors["rounded"] / 5, (output, errors)


def test_a_short_hypothesis_run_passes_for_every_dtype():
    for dtype in DTYPES:
        result = verify(SPEC, dict(SPACE.default), dtype, examples=6, max_numel=1500, seed=5)
        assert result.passed and result.examples == 6, result.failure and result.failure.describe()


def _grads(fn, tensors, do):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    fn(*leaves).backward(do)
    return [t.grad for t in leaves]


@pytest.mark.parametrize("causal, kv_heads, nq, nk", [(False, 4, 13, 29), (True, 2, 29, 13), (True, 1, 13, 29)])
def test_autograd_gives_sdpas_gradients(causal, kv_heads, nq, nk):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, nq, 24), torch.randn(2, kv_heads, nk, 24), torch.randn(2, kv_heads, nk, 24)
    do = torch.randn(2, 4, nq, 24)
    gqa = kv_heads != 4
    got = _grads(lambda *t: flash_attn(*t, is_causal=causal, enable_gqa=gqa), (q, k, v), do)
    expect = _grads(
        lambda *t: F.scaled_dot_product_attention(*t, is_causal=causal, enable_gqa=gqa),
        (q.double(), k.double(), v.double()),
        do.double(),
    )
    for g, e in zip(got, expect):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g.double(), e, atol=1e-5, rtol=1e-5)


def test_gradients_where_no_query_sees_a_key_are_zero_as_in_sdpa():
    for nq, nk in ((0, 5), (4, 0)):
        q, k = torch.randn(1, 2, nq, 16), torch.randn(1, 2, nk, 16)
        do = torch.randn(1, 2, nq, 16)
        got = _grads(flash_attn, (q, k, k.clone()), do)
        expect = _grads(F.scaled_dot_product_attention, (q, k, k.clone()), do)
        assert all(g.shape == e.shape and torch.equal(g, e) for g, e in zip(got, expect))


def test_an_eager_call_that_records_a_graph_skips_the_ops_dispatch_and_gets_its_gradients():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 13, 16), torch.randn(1, 2, 21, 16), torch.randn(1, 2, 21, 16)
    do = torch.randn(1, 4, 13, 16)
    with DispatchedOps() as calls:
        eager = _grads(lambda *t: flash_attn(*t, is_causal=True, enable_gqa=True), (q, k, v), do)
    assert autotune_ops(calls.names) == []
    through_op = _grads(lambda *t: torch.ops.autotune.flash_attn(*t, True, 0.25)[0], (q, k, v), do)
    for e, o in zip(eager, through_op):
        assert torch.equal(e, o)


def test_fake_tensors_go_through_the_op_and_its_fake_backward():
    with FakeTensorMode():
        q, k, v = (torch.empty(2, 4, 9, 32, requires_grad=True) for _ in range(3))
        out = flash_attn(q, k, v, is_causal=True)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.empty(2, 4, 9, 32))
    assert out.shape == dq.shape == dk.shape == dv.shape == (2, 4, 9, 32)


class _Block(torch.nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d // heads
        self.q = torch.nn.Linear(d, d)
        self.kv = torch.nn.Linear(d, 2 * kv_heads * self.head_dim)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x, ours: bool = True):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        attend = flash_attn if ours else F.scaled_dot_product_attention
        y = attend(q, k, v, is_causal=True, enable_gqa=True)
        return self.out(y.transpose(1, 2).reshape(b, n, -1)).square().mean()


@pytest.mark.usefixtures("no_autograd_cache")
def test_torch_compile_fullgraph_matches_eager_torch_forward_and_backward():
    torch.manual_seed(0)
    block = _Block(64, heads=4, kv_heads=2)
    x = torch.randn(2, 19, 64)

    def run(fn):
        block.zero_grad()
        xs = x.clone().requires_grad_()
        loss = fn(xs)
        loss.backward()
        return [loss.detach(), xs.grad] + [p.grad.clone() for p in block.parameters()]

    compiled = torch.compile(block, fullgraph=True)  # inductor compiles on the CPU here
    with runtime.record_launches() as launches:
        got = run(compiled)
    expect = run(lambda xs: block(xs, ours=False))
    for g, e in zip(got, expect):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    assert [name for name, _ in launches] == ["flash_attn", "flash_attn_backward"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_variants_verify_on_the_gpu_near_the_preset_shapes(dtype):
    prefill = problem(2, 16, 2048, 128, causal=True)
    tried = [
        dict(SPACE.default),
        config(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2, dq="separate", delta="output"),
        config(BLOCK_M=32, BLOCK_N=128, num_warps=8, num_stages=3, dq="atomic", delta="recomputed"),
    ]
    for cfg in tried:
        cfg = attention_checks.fitting(SPEC, cfg, prefill, dtype)  # float32 computes in float64: smaller tiles
        result = verify(SPEC, cfg, dtype, examples=10, extra_problems=SPEC.edges_for(prefill))
        assert result.passed, result.failure and result.failure.describe()
