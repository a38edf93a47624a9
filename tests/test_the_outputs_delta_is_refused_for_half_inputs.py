"""The attention backward's delta = rowsum(dO * O), from the output rounded to bf16 or fp16, errs where a row's
cancellation leaves dQ small. On the problem where the Gluon backward's dQ failed `db verify` on an H200
(2026-11-28), the Triton kernels with delta="output" fail the gate alike (the same arithmetic: error 0.225 either
way), and pass with delta recomputed from their own P and dP. So the backward's space refuses delta="output" for half
inputs, either engine, and the runtime no longer serves a stored row that has it."""

import planted_rows
import torch

import autotune
from autotune import runtime
from autotune.gate.verify import check_problem
from autotune.kernels.attention import problems as problems_
from autotune.search_spaces import flash_attn_backward_gluon as engine
from autotune.search_spaces.flash_attn import BACKWARD_SPACE

FAILED_ON_THE_H200 = {
    "batch": 1,
    "causal": True,
    "dtype": "bf16",
    "head_dim": 64,
    "heads": 1,
    "kv_heads": 1,
    "layout": "contiguous",
    "magnitude": 0.01,
    "nk": 187,
    "nq": 2,
    "scale": None,
}
SEED = 85904523
"""The problem and seed `db verify` recorded (H200, the Gluon backward with delta from the output)."""
TRITON = {**BACKWARD_SPACE.default, "BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "ds": "rounded"}


def test_the_outputs_delta_fails_the_gate_there_and_the_recomputed_passes():
    spec = autotune.get("flash_attn_backward")
    output = check_problem(spec, {**TRITON, "delta": "output"}, FAILED_ON_THE_H200, torch.bfloat16, seed=SEED)
    assert output is not None and output.kind == "incorrect", output
    assert output.reason.startswith("output 0: error"), output.reason  # dQ
    assert output.error > 5 * output.budget
    recomputed = check_problem(spec, {**TRITON, "delta": "recomputed"}, FAILED_ON_THE_H200, torch.bfloat16, seed=SEED)
    assert recomputed is None, recomputed


def test_the_space_refuses_the_outputs_delta_for_half_inputs_only():
    for dtype in ("bf16", "fp16"):
        reason = BACKWARD_SPACE.rejects({**TRITON, "delta": "output"}, {**FAILED_ON_THE_H200, "dtype": dtype})
        assert reason is not None and reason.startswith(f"delta=output is refused for {dtype} inputs"), reason
        assert "Nk 187" in reason and BACKWARD_SPACE.rejects(TRITON, {**FAILED_ON_THE_H200, "dtype": dtype}) is None
    assert BACKWARD_SPACE.rejects({**TRITON, "delta": "output"}, {**FAILED_ON_THE_H200, "dtype": "fp32"}) is None
    # the Gluon engine's kernel takes either; its configs, like the Triton engine's, are judged by the space
    assert engine.kernel_config({**TRITON, "delta": "output"})["DELTA"] == "output"
    assert "delta" not in engine.GLUON_FIXED


def test_a_stored_row_with_the_outputs_delta_is_not_served(user_db):
    spec = autotune.get("flash_attn_backward")
    problem = {**problems_.problem(1, 1, 2, 64, nk=187, causal=True), "dtype": "bf16"}
    bucket = spec.bucket(problem)

    def served(delta: str) -> dict:
        # the faster row replaces the other (one key)
        time_ms = 1.0 if delta == "output" else 2.0
        planted_rows.store(
            user_db, spec.name, bucket, time_ms, 3.0, problem=problem, config={**TRITON, "delta": delta}, dtype="bf16"
        )
        return runtime.TunedConfigs(spec).resolve(torch.bfloat16, bucket, problem).config

    assert served("recomputed") == {**TRITON, "delta": "recomputed"}  # the row's config
    assert served("output") == BACKWARD_SPACE.default  # the row is skipped: the default serves the call
