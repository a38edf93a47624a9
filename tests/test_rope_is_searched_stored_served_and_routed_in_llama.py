"""rope is searched like any kernel (a CPU search stores a row the runtime serves), and `autotune.patch` routes a
transformers Llama's apply_rotary_pos_emb calls to it: forced, the model's outputs and gradients stay within the
gate's budget of float64 and rope and rope_backward launch; measured, a call runs rope only where the stored rows of
rope and rope_backward sum to at most torch's time; unpatch leaves the modeling module's function as it was, and a
call outside a patched forward (an unpatched model, another thread) never reaches rope."""

from __future__ import annotations

import copy
import json
import threading

import pytest
import torch
from click.testing import CliRunner
from planted_rows import store
from test_patch_transformers_and_diffusers_models import _loss_and_grads, _require, _within_budget, tiny_llama

import autotune
from autotune import gpu, runtime
from autotune.cli import main
from autotune.kernels.rope import rope

IDS = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))  # 9 positions: odd N
# tiny_llama: 4 query heads and 2 key heads of 8 (hidden 32), batch 2
BUCKET = "rows=32,h=4,hk=2,d=8"


def test_search_stores_a_row_that_rope_launches(user_db):
    cli = CliRunner()
    result = cli.invoke(main, "search rope --dtype fp32 --trials 3 --examples 2 --final-examples 2".split())
    assert result.exit_code == 0, result.output
    listing = cli.invoke(main, ["query", "rope", "--format", "json", "--gpu", gpu.CPU_INTERPRETER])
    rows = json.loads(listing.output)
    assert len(rows) == 1 and rows[0]["bucket"] == "rows=16,h=3,hk=2,d=10" and rows[0]["current"] is True
    assert rows[0]["torch_ms"] is not None  # the eager formula, timed beside it: the routing's evidence
    stored = json.loads(rows[0]["config"])
    q, k = torch.randn(1, 3, 9, 10), torch.randn(1, 2, 9, 10)
    cos, sin = torch.randn(1, 9, 10), torch.randn(1, 9, 10)
    with runtime.record_launches() as launches:
        rope(q, k, cos, sin)
    assert launches == [("rope", stored)]


def test_forced_patch_runs_rope_forward_and_backward_and_unpatch_restores_the_function():
    _require("transformers")
    from transformers.models.llama import modeling_llama

    original = modeling_llama.apply_rotary_pos_emb
    model = tiny_llama()
    base, base_grads = _loss_and_grads(model, IDS)
    ref, ref_grads = _loss_and_grads(copy.deepcopy(model).double(), IDS)
    report = autotune.patch(model, force=True)
    now = {c.path: c.now for c in report.replaced}
    assert now["model.layers.0.self_attn"] == now["model.layers.1.self_attn"] == "rope"
    with runtime.record_launches() as launches:
        out, grads = _loss_and_grads(model, IDS)
    launched = [kernel for kernel, _ in launches]
    assert launched.count("rope") == 2 and launched.count("rope_backward") == 2
    _within_budget(out, ref, base)
    for g, r, b in zip(grads, ref_grads, base_grads):
        _within_budget(g, r, b)
    assert modeling_llama.apply_rotary_pos_emb is original  # swapped only while a patched forward runs

    autotune.unpatch(model)
    assert modeling_llama.apply_rotary_pos_emb is original
    assert type(model.model.layers[0].self_attn) is modeling_llama.LlamaAttention
    with runtime.record_launches() as launches:
        torch.testing.assert_close(_loss_and_grads(model, IDS)[0], base, rtol=0, atol=0)
    assert launches == []


def test_calls_outside_a_patched_forward_stay_on_torch():
    _require("transformers")
    from transformers.models.llama import modeling_llama

    patched, plain = tiny_llama(), tiny_llama()
    autotune.patch(patched, force=True)
    seen = []
    original = modeling_llama.apply_rotary_pos_emb

    def other_thread():
        with torch.no_grad(), runtime.record_launches() as launches:
            plain(IDS)
        seen.append([k for k, _ in launches])

    class Spy(torch.nn.Module):  # runs the unpatched model in another thread from inside the patched forward
        def forward(self, x):
            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join()
            return x

    patched.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, o: Spy()(o))
    with torch.no_grad(), runtime.record_launches() as launches:
        patched(IDS)
    assert "rope" in [k for k, _ in launches]
    assert seen == [[]]  # the other thread's model saw the routing function, which ran the original for it
    with torch.no_grad(), runtime.record_launches() as launches:
        plain(IDS)
    assert launches == [] and modeling_llama.apply_rotary_pos_emb is original
    autotune.unpatch(patched)


@pytest.mark.parametrize("rope_ms, routed", [(0.5, True), (2.0, False)])
def test_measured_policy_routes_rope_by_its_rows(user_db, rope_ms, routed):
    _require("transformers")
    store(user_db, "rope", BUCKET, rope_ms, 1.0)
    store(user_db, "rope_backward", BUCKET, rope_ms, 2.0)  # its torch time holds torch's forward too
    model = tiny_llama()
    autotune.patch(model)
    with runtime.record_launches() as launches:
        _loss_and_grads(model, IDS)
    launched = [kernel for kernel, _ in launches]
    assert (launched.count("rope"), launched.count("rope_backward")) == ((2, 2) if routed else (0, 0))
    decision = next(d for d in autotune.nn.decisions() if d.kind == "rope")
    assert decision.routed is routed and decision.call.startswith("batch=2, heads=4, kv_heads=2, seq=9, head_dim=8")
    autotune.unpatch(model)
