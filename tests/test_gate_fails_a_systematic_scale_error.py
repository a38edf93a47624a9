"""The gate's normwise criterion: an error spread over every element (gradients 2% too large) fails even where
PyTorch's worst element errs so far that the elementwise budget would let it through, in an fp16 attention
backward's outputs as the gate draws them; a correctly rounded output passes, and empty or all-zero outputs
pass (the norm is not defined there)."""

from __future__ import annotations

import torch

from autotune.gate.compare import compare, compare_outputs
from autotune.gate.verify import ReferenceCache, draw_problems
from autotune.kernels.attention.flash_attn_backward import SPEC
from autotune.search_spaces.flash_attn import BACKWARD_SPACE


def scaled(ref: tuple[torch.Tensor, ...], base: tuple[torch.Tensor, ...], factor: float) -> tuple[torch.Tensor, ...]:
    """The float64 reference times factor, rounded to each output's dtype."""
    return tuple((r * factor).to(b.dtype) for r, b in zip(ref, base))


def test_a_two_percent_scale_error_in_an_attention_backward_fails_the_normwise_criterion():
    cache = ReferenceCache()
    problems = draw_problems(SPEC, dict(BACKWARD_SPACE.default), torch.float16, examples=12, seed=1, max_numel=20000)
    judged, caught_by_the_norm = 0, 0
    for problem in problems:
        _, base, ref = cache.get(SPEC, problem, torch.float16, 1)
        if not any(bool((torch.isfinite(r) & (r != 0)).any()) for r in ref):
            continue  # empty or all-zero gradients: a scale changes nothing there
        judged += 1
        assert compare_outputs(scaled(ref, base, 1.0), ref, base)[2] is None, problem
        err, budget, reason = compare_outputs(scaled(ref, base, 1.02), ref, base)
        assert reason is not None and err > budget, problem
        caught_by_the_norm += "normwise error" in reason  # the elementwise budget let it through
    assert judged >= 6 and caught_by_the_norm >= judged // 2, (judged, caught_by_the_norm)


def test_the_normwise_criterion_catches_what_a_wide_elementwise_budget_lets_through():
    # PyTorch errs 40% on a few tiny elements (a gradient's cancelling sums): the elementwise budget is about
    # 4 x 0.4, so a scale error of 2% everywhere passes it; its normwise budget (from PyTorch's) is 1%.
    ref = torch.randn(4096, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ref[:8] = 0.01
    base = ref.to(torch.float16)
    base[:8] = 0.014
    reason = compare(torch.ones_like(ref).to(torch.float16), ref, base, torch.float16)[2]
    assert reason is not None and reason.startswith("error "), reason  # nonsense still fails elementwise
    err, budget, reason = compare((ref * 1.02).to(torch.float16), ref, base, torch.float16)
    assert reason is not None and reason.startswith("normwise error "), reason
    assert "PyTorch torch.float16 normwise error" in reason and err > 5 * budget
    assert compare((ref * 1.0005).to(torch.float16), ref, base, torch.float16)[2] is None  # 0.05%: within it


def test_the_returned_error_stays_elementwise_when_both_criteria_pass():
    ref = torch.linspace(-3, 3, 1001, dtype=torch.float64)
    base = ref.to(torch.float16)
    err, budget, reason = compare(base, ref, base, torch.float16)
    assert reason is None
    assert err == float(((base.double() - ref).abs() / (ref.abs() + 3 * torch.finfo(torch.float16).eps)).max())


def test_empty_and_all_zero_outputs_pass():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        empty = torch.empty(0, 3, dtype=dtype)
        assert compare(empty, empty.double(), empty, dtype)[2] is None
        zeros = torch.zeros(5, 7, dtype=dtype)
        assert compare(zeros, zeros.double(), zeros, dtype)[2] is None
        # the norm is undefined on an all-zero reference; the elementwise criterion still judges it
        assert compare(zeros + 1e-3, zeros.double(), zeros, dtype)[2] is not None
    rows = torch.tensor([[float("nan"), float("nan")], [0.0, 0.0]], dtype=torch.float64)  # a fully masked row
    assert compare(rows.to(torch.float16), rows, rows.to(torch.float16), torch.float16)[2] is None
