"""A patched module's F.scaled_dot_product_attention calls go to flash_attn without a torch function mode seeing
its other torch calls: for the forward's duration torch.nn.functional's attribute routes that thread's calls,
and torch's function is back afterwards. A forward that took sdpa by name at import, which the attribute does not
reach, runs inside the mode instead, and is routed too."""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention

import autotune
from autotune import runtime
from autotune.nn.attention import TORCH_SDPA


class Attention(torch.nn.Module):
    """Looks sdpa up on torch.nn.functional at each call, and notes whether a torch function mode was on."""

    def forward(self, q):
        self.mode_on = torch._C._is_torch_function_mode_enabled()
        return F.scaled_dot_product_attention(q, q, q, is_causal=True)


class AttentionByName(torch.nn.Module):
    """Calls sdpa through the name it imported."""

    def forward(self, q):
        self.mode_on = torch._C._is_torch_function_mode_enabled()
        return scaled_dot_product_attention(q, q, q, is_causal=True)


def launches(fn) -> list[str]:
    with runtime.record_launches() as found:
        fn()
    return [kernel for kernel, _ in found]


def test_the_forward_routes_sdpa_without_a_mode_and_puts_torchs_function_back(user_db):
    model, q = Attention(), torch.randn(1, 2, 8, 8)
    expected = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    autotune.patch(model, force=True)
    with torch.no_grad():
        assert launches(lambda: torch.testing.assert_close(model(q), expected)) == ["flash_attn"]
    assert model.mode_on is False
    assert F.scaled_dot_product_attention is TORCH_SDPA
    assert launches(lambda: F.scaled_dot_product_attention(q, q, q)) == []  # outside the module: torch's
    autotune.unpatch(model)


def test_a_forward_that_imported_sdpa_by_name_is_routed_inside_the_mode(user_db):
    model, q = AttentionByName(), torch.randn(1, 2, 8, 8)
    autotune.patch(model, force=True)
    with torch.no_grad():
        assert launches(lambda: model(q)) == ["flash_attn"]
    assert model.mode_on is True
    autotune.unpatch(model)


def test_another_threads_sdpa_calls_stay_on_torch_during_a_routing_forward(user_db):
    # While the patched forward runs, another thread's F.scaled_dot_product_attention call runs torch's.
    started, release, other = threading.Event(), threading.Event(), {}

    class Waits(torch.nn.Module):
        def forward(self, q):
            started.set()
            release.wait(10)
            return F.scaled_dot_product_attention(q, q, q)

    def elsewhere():
        started.wait(10)
        other["launches"] = launches(lambda: F.scaled_dot_product_attention(q, q, q))
        release.set()

    model, q = Waits(), torch.randn(1, 2, 8, 8)
    autotune.patch(model, force=True)
    thread = threading.Thread(target=elsewhere)
    thread.start()
    with torch.no_grad():
        mine = launches(lambda: model(q))
    thread.join(10)
    autotune.unpatch(model)
    assert mine == ["flash_attn"] and other["launches"] == []
