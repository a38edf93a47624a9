"""flash_attn forward: the correctness cases of attention (N = 1, lengths no block divides, decode against a
long cache, causal with Nq < Nk and Nq > Nk, large logits, a custom scale, GQA, every head dim, strided
layouts) pass the gate against float64 in fp32, fp16 and bf16 for the default and every variant (edge-only
masks, tensor descriptors, key splits merged by a second kernel or by the last split program, packed GQA
heads); the public function has sdpa's semantics, causal alignment included; the stored config is the one
launched; bad arguments fail before any launch."""

from __future__ import annotations

import dataclasses
import math

import attention_checks
import pytest
import torch
import torch.nn.functional as F
from stored_rows import store_best

from autotune import gpu, runtime
from autotune.gate.compare import compare, outputs_like
from autotune.gate.verify import ReferenceCache, check_problem, verify
from autotune.kernels import flash_attn
from autotune.kernels.attention import flash_attn as flash_attn_module
from autotune.kernels.attention import problems as problems_
from autotune.kernels.attention import reference as math_
from autotune.kernels.attention.flash_attn import SPEC, descriptor_ok
from autotune.search_spaces.flash_attn import FORWARD_SPACE as SPACE

pytestmark = [
    pytest.mark.usefixtures("user_db"),  # public calls read a fresh, empty user database: the default config
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # masked lanes compute exp(-inf) and 0 / 0 on purpose
]

DTYPES = attention_checks.DTYPES
problem = problems_.problem

CASES = {
    "N=1": problem(1, 2, 1, 32),
    "ragged N": problem(2, 2, 37, 64),
    "decode, Nk=1000": problem(1, 2, 1, 64, nk=1000),
    "causal Nq<Nk": problem(1, 2, 19, 32, nk=45, causal=True),
    "causal Nq>Nk": problem(1, 2, 45, 32, nk=19, causal=True, layout="bnhd"),
    "large logits": problem(1, 2, 33, 32, nk=40, magnitude=8.0, causal=True),
    "custom scale": problem(1, 2, 20, 32, nk=30, scale=0.3, layout="padded"),
    "GQA": problem(2, 4, 21, 32, kv_heads=2, nk=29, causal=True),
    "near-uniform": problem(1, 1, 18, 16, nk=50, magnitude=0.01),
}


config = SPACE.with_overrides


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("case", CASES)
def test_default_passes_the_gate_on_the_correctness_cases(case, dtype):
    attention_checks.assert_passes(SPEC, dict(SPACE.default), [CASES[case]], [dtype])


@pytest.mark.parametrize("head_dim", problems_.HEAD_DIMS + (1, 72))
def test_every_head_dim_passes_the_gate(head_dim):
    # 80 and 96 run padded to 128, 1 to 16; causal with Nq < Nk.
    attention_checks.assert_passes(
        SPEC, dict(SPACE.default), [problem(1, 1, 17, head_dim, nk=23, causal=True)], (torch.float32, torch.float16)
    )


VARIANTS = {
    "mask every block": (
        config(mask="every", BLOCK_M=32, BLOCK_N=16, num_warps=2),
        [CASES["causal Nq<Nk"], CASES["causal Nq>Nk"], CASES["ragged N"]],
    ),
    "descriptors": (
        config(kv_load="descriptor", BLOCK_M=16, num_warps=2, num_stages=1),
        [CASES["causal Nq>Nk"], CASES["custom scale"], problem(1, 2, 21, 1, nk=33)],
    ),
    "key splits": (
        config(KV_SPLITS=8, BLOCK_M=16, num_warps=2),
        [CASES["decode, Nk=1000"], problem(1, 2, 3, 80, nk=500, causal=True, magnitude=8.0)],
    ),
    "splits merged by the program that finishes last": (
        config(KV_SPLITS=8, combine="last_split", BLOCK_M=16, num_warps=2),
        [
            CASES["decode, Nk=1000"],
            problem(1, 2, 3, 80, nk=500, causal=True, magnitude=8.0),
            problem(2, 6, 1, 32, kv_heads=2, nk=700),
        ],
    ),
    "packed GQA heads": (
        config(gqa="packed", KV_SPLITS=4, BLOCK_M=16, num_warps=2),
        [problem(1, 6, 1, 32, kv_heads=2, nk=700), problem(1, 4, 9, 32, kv_heads=1, nk=300, causal=True)],
    ),
    "large tiles": (
        config(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=3, gqa="packed"),
        [problem(1, 4, 70, 32, kv_heads=2, nk=130, causal=True)],
    ),
    "P rounded": (
        config(p="rounded", BLOCK_M=16, BLOCK_N=32, num_warps=2),
        [CASES["causal Nq<Nk"], CASES["large logits"], CASES["decode, Nk=1000"]],
    ),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_pass_the_gate(variant):
    attention_checks.assert_passes(SPEC, *VARIANTS[variant])


def test_the_last_split_merges_as_the_combine_kernel_does_and_leaves_its_counters_at_zero():
    # Packed GQA decode over splits of uneven use (the last holds 4 of 128 keys), three launches in a row: each
    # must find the counters at 0 (else a tile merges early, from partials not yet written, or never).
    case = problem(2, 8, 1, 32, kv_heads=2, nk=900)
    inputs, base, _ = ReferenceCache().get(SPEC, case, torch.float16, 1)
    merged = {}
    for combine in ("kernel", "last_split", "last_split", "last_split"):
        out = outputs_like(base)
        SPEC.launch(inputs, config(KV_SPLITS=8, gqa="packed", BLOCK_M=16, num_warps=2, combine=combine), out)
        assert all(not counters.any() for counters in flash_attn_module._ARRIVALS.values())
        merged.setdefault(combine, []).append(out)
    for out in merged["last_split"]:
        for got, want in zip(out, merged["kernel"][0]):  # o (float16) and the log-sum-exp (float32)
            torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    assert flash_attn_module._ARRIVALS  # the counters the launches used


def test_split_p_keeps_a_long_decode_average_right():
    # One query over 16381 keys (head dim 16, logits of spread 4): the output averages thousands of values
    # that cancel, and P rounded to float16 before P @ V leaves up to 2.5 ulps of the output's largest
    # element where the H100's sdpa errs 0.3 (the gate failed both fp16 decode candidates there, 2026-11-23).
    case = problem(1, 8, 1, 16, nk=16381, scale=1.0)
    inputs, base, ref = ReferenceCache().get(SPEC, case, torch.float16, 1)
    errors = {}
    for p in ("rounded", "split"):
        out = outputs_like(base)
        SPEC.launch(inputs, config(p=p, BLOCK_M=16, BLOCK_N=64, num_warps=4), out)
        errors[p] = max(compare(out[0][:, h], ref[0][:, h], ref[0][:, h], torch.float16)[0] for h in range(8))
    # float16's unit roundoff is 0.00049: split is the output's own rounding, rounded several times it.
    assert errors["split"] < 0.0007 < 0.0014 < errors["rounded"], errors


def test_descriptors_fall_back_to_pointers_where_tma_cannot_read():
    q = torch.randn(1, 2, 5, 64, dtype=torch.float16)
    assert descriptor_ok(q)
    assert not descriptor_ok(torch.randn(1, 2, 5, 1, dtype=torch.float16))  # rows 2 bytes apart
    assert not descriptor_ok(torch.randn(1, 2, 5, 65, dtype=torch.float16)[..., :64])  # rows 130 bytes apart
    assert not descriptor_ok(torch.randn(1, 2, 5, 128, dtype=torch.float16)[..., ::2])


def test_a_short_hypothesis_run_passes_for_every_dtype():
    for dtype in DTYPES:
        result = verify(SPEC, dict(SPACE.default), dtype, examples=10, max_numel=2000, seed=3)
        assert result.passed and result.examples == 10, result.failure and result.failure.describe()


def test_the_gate_checks_the_log_sum_exp_and_every_output_row():
    def lse_off_by_a_little(inputs, cfg, out):
        SPEC.launch(inputs, cfg, out)
        out[1].add_(1e-4)  # what a forgotten ln(2) or scale would do, only smaller
        return out

    def last_row_unwritten(inputs, cfg, out):
        keep = out[0][..., -1, :].clone()
        SPEC.launch(inputs, cfg, out)
        out[0][..., -1, :] = keep  # out comes poisoned with NaN
        return out

    for launch, why in [(lse_off_by_a_little, "output 1: error"), (last_row_unwritten, "unwritten")]:
        wrong = dataclasses.replace(SPEC, launch=launch)
        result = verify(wrong, dict(SPACE.default), torch.float32, examples=0, extra_problems=[CASES["ragged N"]])
        assert not result.passed and why in result.failure.reason


def test_an_output_whose_terms_cancel_is_judged_against_the_size_of_its_terms():
    # Two keys with weights 2/3 and 1/3 and values 1 and -2: the output is 0, its terms are 2/3 in size.
    q = torch.zeros(1, 1, 1, 16)
    k = torch.zeros(1, 1, 2, 16)
    k[0, 0, 0, 0], q[0, 0, 0, 0] = math.log(2.0), 1.0
    v = torch.tensor([1.0, -2.0]).view(1, 1, 2, 1).expand(1, 1, 2, 16).contiguous()
    inputs = {"q": q, "k": k, "v": v, "is_causal": False, "scale": 1.0}
    o, _ = math_.reference_forward(inputs)
    floor, lse_floor = math_.forward_floor(inputs)
    assert o.abs().max() < 1e-6 and lse_floor is None
    torch.testing.assert_close(floor, torch.full_like(floor, math.sqrt(2.0) * 2 / 3), rtol=1e-6, atol=0.0)


def test_a_decode_row_of_two_nearly_tied_keys_passes_where_it_failed_without_the_floor():
    # db verify flagged this problem on the H100 (seed 1870362795): scale 1 at head dim 256 makes scores of
    # ~2400 whose float32 rounding (~1e-4) is all the error, on outputs that are the leftover of two terms
    # of ~5. Every config failed it alike (here: error 0.0745 > budget 0.0668 before the floor).
    tied = {
        "batch": 1,
        "causal": False,
        "head_dim": 256,
        "heads": 3,
        "kv_heads": 1,
        "layout": "contiguous",
        "magnitude": 8.0,
        "nk": 114,
        "nq": 114,
        "scale": 1.0,
    }
    cfg = config(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=2, mask="every", p="split")
    assert check_problem(SPEC, cfg, tied, torch.float16, seed=1) is None

    # A kernel off by a little is still caught there: the output scaled by 1.01 (budget 0.0044, error 0.011).
    def off(inputs, c, out):
        SPEC.launch(inputs, c, out)
        out[0].mul_(1.01)
        return out

    failure = check_problem(dataclasses.replace(SPEC, launch=off), cfg, tied, torch.float16, seed=1)
    assert failure is not None and "output 0: error" in failure.reason


@pytest.mark.parametrize("nq, nk", [(5, 9), (9, 5), (1, 7), (7, 1)])
def test_causal_mask_is_aligned_top_left_as_torch_aligns_it(nq, nk):
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, nq, 16), torch.randn(1, 2, nk, 16), torch.randn(1, 2, nk, 16)
    top_left = torch.ones(nq, nk, dtype=torch.bool).tril()
    assert bool(top_left.any(-1).all())  # no query row is fully masked, whatever Nq and Nk are
    expect = F.scaled_dot_product_attention(q, k, v, attn_mask=top_left)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, is_causal=True), expect)  # torch's own
    torch.testing.assert_close(flash_attn(q, k, v, is_causal=True), expect)
    bottom_right = torch.ones(nq, nk, dtype=torch.bool).tril(diagonal=nk - nq)
    if bool(bottom_right.any(-1).all()):
        assert not torch.allclose(
            flash_attn(q, k, v, is_causal=True), F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right)
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_public_function_matches_sdpa(dtype):
    torch.manual_seed(0)
    tol = {} if dtype is torch.float32 else dict(atol=2e-3, rtol=2e-3)
    q, k, v = (torch.randn(2, 4, n, 40).to(dtype) for n in (23, 31, 31))
    for kwargs in (dict(), dict(is_causal=True, scale=0.2)):
        torch.testing.assert_close(
            flash_attn(q, k, v, **kwargs), F.scaled_dot_product_attention(q, k, v, **kwargs), **tol
        )
    kv = (k[:, :2], v[:, :2])  # grouped heads
    torch.testing.assert_close(
        flash_attn(q, *kv, is_causal=True, enable_gqa=True),
        F.scaled_dot_product_attention(q, *kv, is_causal=True, enable_gqa=True),
        **tol,
    )
    kv = (k[:, :1], v[:, :1])  # one key/value head broadcast, as torch broadcasts it without enable_gqa
    torch.testing.assert_close(flash_attn(q, *kv), F.scaled_dot_product_attention(q, *kv), **tol)
    strided = q.transpose(1, 2).contiguous().transpose(1, 2)  # (B, N, H, D) memory
    torch.testing.assert_close(flash_attn(strided, k, v), F.scaled_dot_product_attention(q, k, v), **tol)
    columns = torch.randn(2, 4, 23, 80).to(dtype)[..., ::2]  # elements of a row 2 apart: copied, then read
    torch.testing.assert_close(flash_attn(columns, k, v), F.scaled_dot_product_attention(columns, k, v), **tol)


def test_empty_inputs_give_what_sdpa_gives_without_a_launch():
    q, k = torch.randn(2, 3, 4, 16), torch.randn(2, 3, 5, 16)
    with runtime.record_launches() as launches:
        for args in [(q[:, :, :0], k, k), (q[:0], k[:0], k[:0]), (q, k[:, :, :0], k[:, :, :0])]:
            out = flash_attn(*args)
            expect = F.scaled_dot_product_attention(*args)
            assert out.shape == expect.shape and torch.equal(out, expect)  # no keys: zeros, as sdpa
    assert launches == []


def test_a_float32_call_is_never_served_a_config_whose_float64_tiles_do_not_fit(user_db):
    # float32 inputs compute in float64: a tile that fits in 16 bits may not (Triton 3.6 failed such
    # configs on the H100 for lack of shared memory). The space says so before anything compiles, and the
    # runtime passes over a stored float32 row whose config does not fit the call.
    big = config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2)
    wide = problem(1, 2, 100, 256)
    assert SPACE.rejects(big, SPEC.problem_for(wide, torch.float16)) is None
    assert "shared memory" in SPACE.rejects(big, SPEC.problem_for(wide, torch.float32))
    one_stage = config(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=1)
    assert SPACE.rejects(one_stage, SPEC.problem_for(problem(1, 2, 100, 128), torch.float16)) is None
    assert "values per thread" in SPACE.rejects(one_stage, SPEC.problem_for(problem(1, 2, 100, 128), torch.float32))
    for dtype in ("fp16", "fp32"):
        store_best(user_db, SPEC, "bh=2,g=1,nq=128,nk=128,d=64,causal=0", big, dtype=dtype)
    with runtime.record_launches() as launches:
        for dtype in (torch.float16, torch.float32):
            q = torch.randn(1, 2, 100, 256, dtype=dtype)
            torch.testing.assert_close(
                flash_attn(q, q, q),
                F.scaled_dot_product_attention(q, q, q),
                **({} if dtype == torch.float32 else dict(atol=2e-3, rtol=2e-3)),
            )
    assert [c for _, c in launches] == [big, dict(SPACE.default)]  # the nearest row in fp16; in fp32 none


def test_public_calls_launch_the_stored_config_of_their_bucket(user_db):
    stored = config(BLOCK_M=16, BLOCK_N=32, num_warps=2, mask="every", KV_SPLITS=2, num_stages=1)
    store_best(user_db, SPEC, "bh=2,g=1,nq=1,nk=64,d=32,causal=0", stored)
    q, k = torch.randn(1, 2, 1, 32), torch.randn(1, 2, 50, 32)
    with runtime.record_launches() as launches:
        out = flash_attn(q, k, k)  # exact bucket
        flash_attn(q, k[:, :, :40], k[:, :, :40])  # the same bucket
        flash_attn(torch.randn(1, 2, 40, 32), k, k)  # nq=64: the nearest bucket, where the config also runs
        flash_attn(q, k[:, :, :20], k[:, :, :20])  # nk=32: 2 splits of 32 keys do not fit, so the default
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, k))
    assert [c for _, c in launches] == [stored, stored, stored, dict(SPACE.default)]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda q: flash_attn(q.int(), q, q), TypeError, "q must have a floating dtype"),
        (lambda q: flash_attn(q, [1.0], q), TypeError, "k must be a torch.Tensor"),
        (lambda q: flash_attn(q, q.half(), q), TypeError, "one dtype"),
        (lambda q: flash_attn(q[0], q[0], q[0]), ValueError, "q must be 4-D"),
        (lambda q: flash_attn(q, q, q[:, :, :3]), ValueError, "k and v must agree"),
        (lambda q: flash_attn(q, q[:1], q[:1]), ValueError, "one batch size"),
        (lambda q: flash_attn(q, q, q[..., :8]), ValueError, "one head dim"),
        (lambda q: flash_attn(q, q[:, :3], q[:, :3], enable_gqa=True), ValueError, "multiple of k's"),
        (lambda q: flash_attn(q, q[:, :2], q[:, :2]), ValueError, "pass enable_gqa=True"),
        (lambda q: flash_attn(*(torch.randn(1, 1, 2, 257),) * 3), ValueError, r"head dim must be in 1\.\.256"),
        (lambda q: flash_attn(q, q, q, is_causal=1), TypeError, "is_causal must be a bool"),
        (lambda q: flash_attn(q, q, q, scale="0.1"), TypeError, "scale must be a float"),
        (lambda q: flash_attn(q, q, q, scale=math.inf), ValueError, "scale must be finite"),
        (lambda q: flash_attn(q, q.to("meta"), q), ValueError, "k must be on"),
    ],
)
def test_bad_arguments_fail_before_any_launch(call, error, message):
    with runtime.record_launches() as launches, pytest.raises(error, match=message):
        call(torch.randn(2, 4, 6, 16))
    assert launches == []


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_variants_verify_on_the_gpu_near_the_preset_shapes(dtype):
    prefill = problem(2, 16, 2048, 128, causal=True)
    decode = problems_.parse_shape("2x16/4x1:32768x128")
    tried = [
        (dict(SPACE.default), [prefill, decode]),
        (config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3, kv_load="descriptor"), [prefill]),
        (config(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=2, mask="every"), [prefill]),
        (
            config(
                BLOCK_M=16, BLOCK_N=128, num_warps=4, num_stages=3, KV_SPLITS=16, gqa="packed", kv_load="descriptor"
            ),
            [decode],
        ),
        (
            config(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=3, KV_SPLITS=16, gqa="packed", combine="last_split"),
            [decode],
        ),
    ]
    for cfg, presets in tried:
        for preset in presets:
            cfg = attention_checks.fitting(SPEC, cfg, preset, dtype)  # float32 computes in float64: smaller tiles
            result = verify(SPEC, cfg, dtype, examples=10, extra_problems=SPEC.edges_for(preset))
            assert result.passed, result.failure and result.failure.describe()


@pytest.mark.gpu
def test_peak_memory_grows_linearly_not_quadratically():
    device = gpu.device()
    peaks, held = {}, {}
    for n in (8192, 16384, 32768):
        q, k, v = (torch.randn(1, 4, n, 128, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        flash_attn(q, k, v, is_causal=True).sum().backward()
        torch.cuda.synchronize()
        peaks[n], held[n] = torch.cuda.max_memory_allocated() - before, q.numel() * q.element_size()
        del q, k, v
    # Forward and backward hold o, dO, dq, dk, dv and row statistics: a few times one input, never N x N.
    naive_scores = 4 * 32768 * 32768 * 2  # the bf16 N x N scores of 4 heads that naive attention stores
    print(
        f"\npeak bytes above inputs, causal fwd+bwd, B=1 H=4 D=128 bf16: {peaks}"
        f"; one input: {held}; naive N x N scores at 32768: {naive_scores}"
    )
    assert peaks[32768] < 8 * held[32768] and peaks[32768] < naive_scores / 20, (peaks, naive_scores)
    # Doubling N doubles the peak, give or take allocator rounding; stored scores would quadruple it.
    assert peaks[32768] / peaks[16384] < 2.3 and peaks[16384] / peaks[8192] < 2.3, peaks


@pytest.mark.gpu
def test_the_last_split_merge_gives_the_same_output_on_every_launch_eager_and_graphed():
    # A race in the counting (a tile merged before all its partials are written) shows as an output that changes from
    # launch to launch: the merge's order is fixed, so a right one is bit-identical every time.
    device = gpu.device()
    q = torch.randn(2, 16, 1, 128, device=device, dtype=torch.bfloat16)
    k, v = (torch.randn(2, 4, 32768, 128, device=device, dtype=torch.bfloat16) for _ in range(2))
    o, lse = torch.empty_like(q), torch.empty(2, 16, 1, device=device)
    cfg = config(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=3, KV_SPLITS=16, gqa="packed", combine="last_split")

    def attend():
        flash_attn_module.launch(q, k, v, o, lse, False, 128**-0.5, cfg)

    attend()
    first = o.clone()
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
    assert (first.double() - expected).abs().max() < 1e-3
    changed = 0
    for _ in range(200):
        attend()
        changed += not torch.equal(o, first)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        attend()
    for _ in range(200):
        o.zero_()
        graph.replay()
        changed += not torch.equal(o, first)
    torch.cuda.synchronize()
    assert changed == 0, f"{changed} of 400 launches gave another output"
