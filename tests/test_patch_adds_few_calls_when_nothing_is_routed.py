"""A patched model whose calls all stay on torch (no stored row for this CPU: nothing is routed) adds little to
each call: a repeated call's routing is one key and one dict lookup, and the sdpa scope intercepts nothing but
sdpa. Pinned by counting the function calls (Python and built-in) a repeated call makes, patched against unpatched:
deterministic, where a host-time budget measured on a shared 2-core machine failed on load alone. What those calls
cost in host time is benchmarks/patch_host_cost.py's to measure (benchmarks/results/cpu-interpreter/)."""

from __future__ import annotations

import collections
import copy
import pathlib
import sys

import torch
import torch.nn.functional as F

import autotune
from autotune.nn import routing

NORM_CALLS = 16
"""Function calls a patched norm may add to a repeated call (LayerNorm 14, RMSNorm 12 today: its forward, its
parameter reads, the key, the lookup, and the built-ins they call; deciding each call anew would add 37-41)."""
ATTENTION_CALLS = 24
"""Function calls a patched attention module may add to a repeated call (21 today: the scope, the routed sdpa, the
key, the lookup; deciding each call anew would add 51, a torch function mode around its forward 39)."""


class SelfAttention(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)

    def forward(self, x):
        b, n, width = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, width)


def calls_made(fn) -> collections.Counter:
    """The function calls fn() makes, Python and built-in, by (file or "builtin", name), its first call not
    counted (that one decides the routes)."""
    fn()
    made = collections.Counter()

    def profile(frame, event, arg):
        if event == "call":
            made[(pathlib.Path(frame.f_code.co_filename).name, frame.f_code.co_name)] += 1
        elif event == "c_call":
            made[("builtin", getattr(arg, "__qualname__", repr(arg)))] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return made


def test_a_repeated_call_of_a_patched_module_adds_a_few_function_calls(user_db):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(16), SelfAttention(16, 2), torch.nn.RMSNorm(16))
    patched = copy.deepcopy(model)
    report = autotune.patch(patched)
    assert [c.now for c in report.replaced] == ["layer_norm", "flash_attn", "rms_norm"]
    x = torch.randn(1, 4, 16)
    try:
        with torch.no_grad():
            for i, budget in enumerate((NORM_CALLS, ATTENTION_CALLS, NORM_CALLS)):
                added = calls_made(lambda: patched[i](x)) - calls_made(lambda: model[i](x))
                assert 0 < sum(added.values()) <= budget, (type(model[i]).__name__, added)
                assert not any(name.startswith(("_decide", "_reason", "_norm_reason")) for _, name in added)
        assert routing.decisions() and not any(d.routed for d in routing.decisions())  # everything on torch
    finally:
        autotune.unpatch(patched)


def test_the_host_cost_benchmark_measures_each_model(user_db, benchmark_script, monkeypatch):
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    threads = torch.get_num_threads()
    try:
        models = benchmark_script("patch_host_cost").measure(
            calls=2, repeats=2, dtype=torch.float32, compile_backend=None
        )
    finally:
        torch.set_num_threads(threads)
    assert {"unet-block forward", "decoder-layer forward+backward"} <= set(models)
    for result in models.values():
        assert result["patched modules"] >= 3 and result["routed shapes"] == 0
        assert {variant: len(values) for variant, values in result["samples_us"].items()} == {
            "unpatched": 2,
            "patched": 2,
        }
