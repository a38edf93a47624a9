"""Hugging Face transformers models (only where transformers is already imported: a model from it imports it):

- RMSNorm modules whose forward is LlamaRMSNorm's (Llama, Mistral, Mixtral, Qwen2/3 and their MoE variants, Phi-3,
  ...: compared by source) run the tuned rms_norm. Others, such as Gemma's (1 + weight) and OLMo-2's, are left.
  Where the weight's dtype differs from the input's, transformers returns the promoted dtype: those calls stay on
  its forward.
- Gated MLPs whose forward is LlamaMLP's (`down_proj(act_fn(gate_proj(x)) * up_proj(x))`: Llama, Mistral, Qwen2/3,
  ...), gating with silu, gelu or gelu_pytorch_tanh, run the tuned gated_mlp (gate and up projections as one GEMM
  with act(g) * u in its epilogue, then the down projection) where it takes the call; `autotune.nn.GatedMLP`
  decides which calls, as it does for its own.
- Rotary embeddings: an attention module whose forward calls its modeling module's Llama-style
  `apply_rotary_pos_emb` has those calls routed to the tuned rope for the forward's duration (`rope_scope`).
- Attention: a model on "sdpa" is switched, through transformers' attention-function registry
  (`AttentionInterface`, and the sdpa mask function under the same name in `AttentionMaskInterface`), to
  transformers' own sdpa function with its sdpa calls routed (`sdpa_scope.call_routed`): its
  F.scaled_dot_product_attention call (mask, GQA and causal handling as transformers does them) goes to flash_attn
  where it takes the arguments.
"""

from __future__ import annotations

import functools
import inspect
import sys
import textwrap

import torch

from autotune import kernels
from autotune.nn import support
from autotune.nn.linear import GatedMLP
from autotune.nn.routing import route, routed
from autotune.patching import sdpa_scope
from autotune.patching.context import PatchContext
from autotune.patching.rope_scope import route_rope_calls

ATTENTION = {"measured": "autotune", "always": "autotune_always"}
"""The names autotune's attention functions are registered under, per routing policy."""


@functools.cache
def _forward_source(cls: type) -> str:
    try:
        return textwrap.dedent(inspect.getsource(cls.forward))
    except (OSError, TypeError):
        return ""


class _TunedRMSNorm:
    """Mixed in before a transformers RMSNorm class with LlamaRMSNorm's forward: rms_norm where it takes the call."""

    _autotune_policy: str

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight = support.parameter(self, "weight")
        if route(("rms_norm", self._autotune_policy, "transformers"), self._decide, hidden_states, weight) is True:
            n = hidden_states.shape[-1]
            return kernels.rms_norm(hidden_states, (n,), weight, eps=self.variance_epsilon)
        return super().forward(hidden_states)

    def _decide(self, settings: tuple, x: torch.Tensor, weight: torch.Tensor) -> bool | str:
        why = support.tensor(x) or support.empty(x)
        if why is None and (
            weight.dtype is not x.dtype or weight.shape != x.shape[-1:] or weight.get_device() != x.get_device()
        ):
            why = "a weight in another dtype, shape or device than the input's"
        if why is not None:
            return why
        n = x.shape[-1]
        return routed(self._autotune_policy, "rms_norm", x.dtype, x.numel() // n, n, support.grad_needed(x, weight))


@functools.cache
def _tuned_rms_class(cls: type) -> type:
    return type(cls.__name__, (_TunedRMSNorm, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})


GATED_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh"}
"""transformers' `hidden_act` names gated_mlp computes, and its name for each."""


class _TunedGatedMLP:
    """Mixed in before a transformers MLP class with LlamaMLP's forward: gated_mlp where it takes the call (decided
    as `autotune.nn.GatedMLP` decides), else the class's own forward."""

    _autotune_policy: str
    _autotune_activation: str
    _projections = GatedMLP._projections
    _decide = GatedMLP._decide

    @property
    def policy(self) -> str:  # what GatedMLP._decide reads
        return self._autotune_policy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parameters = [support.parameter(m, name) for m in self._projections() for name in ("weight", "bias")]
        settings = ("gated_mlp", self._autotune_policy, self._autotune_activation, "transformers")
        if route(settings, self._decide, x, *parameters) is True:
            w_gate, b_gate, w_up, b_up, w_down, b_down = parameters
            return kernels.gated_mlp(
                x, w_gate, w_up, w_down, self._autotune_activation, b_gate=b_gate, b_up=b_up, b_down=b_down
            )
        return super().forward(x)


@functools.cache
def _tuned_mlp_class(cls: type) -> type:
    return type(cls.__name__, (_TunedGatedMLP, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})


def _gated_activation(module: torch.nn.Module) -> str | None:
    act = getattr(getattr(module, "config", None), "hidden_act", None)
    return GATED_ACTIVATIONS.get(act) if isinstance(act, str) else None


def _patch_gated_mlps(ctx: PatchContext) -> None:
    from transformers.models.llama.modeling_llama import LlamaMLP

    llama = _forward_source(LlamaMLP)
    for path, module in ctx.modules():
        cls = type(module)
        if not (cls.__module__.startswith("transformers.") and cls.__name__.endswith("MLP")):
            continue
        if _forward_source(cls) != llama:
            continue  # another MLP (an ungated one, a MoE's): its Linear layers are looked at as any others
        ctx.mark_done(module)
        activation = _gated_activation(module)
        if activation is None:
            act = getattr(getattr(module, "config", None), "hidden_act", None)
            ctx.record(path, module, "torch", f"its activation {act!r} is not one gated_mlp computes")
            continue
        ctx.swap_class(module, _tuned_mlp_class(cls), _autotune_policy=ctx.policy, _autotune_activation=activation)
        ctx.record(path, cls.__name__, "gated_mlp")
        for child in module.modules():  # its projections run inside gated_mlp's call: no rule of their own
            ctx.mark_done(child)


def _attention(policy: str):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def attention(module, query, key, value, attention_mask, **kwargs):
        return sdpa_scope.call_routed(
            policy, sdpa_attention_forward, module, query, key, value, attention_mask, **kwargs
        )

    return attention


@functools.cache
def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    for policy, name in ATTENTION.items():
        AttentionInterface.register(name, _attention(policy))
        AttentionMaskInterface.register(name, sdpa_mask)


def patch_transformers(ctx: PatchContext) -> None:
    if "transformers" not in sys.modules:
        return
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    llama = _forward_source(LlamaRMSNorm)
    for path, module in ctx.modules():
        cls = type(module)
        if not (cls.__module__.startswith("transformers.") and cls.__name__.endswith("RMSNorm")):
            continue
        ctx.mark_done(module)
        if _forward_source(cls) != llama or not hasattr(module, "variance_epsilon"):
            ctx.record(path, module, "torch", "its forward is not LlamaRMSNorm's, so not rms_norm's math")
            continue
        ctx.swap_class(module, _tuned_rms_class(cls), _autotune_policy=ctx.policy)
        ctx.record(path, cls.__name__, "rms_norm")
    _patch_gated_mlps(ctx)
    route_rope_calls(ctx)
    _route_attention(ctx)


def _attention_configs(ctx: PatchContext) -> list[tuple[str, torch.nn.Module, object]]:
    """(path, module, config) of each transformers config whose attention implementation routes the model's
    attention: the model's own, or for a part of a model (a decoder layer), each config its modules hold."""
    from transformers import PretrainedConfig, PreTrainedModel

    if isinstance(ctx.model, PreTrainedModel):
        return [("", ctx.model, ctx.model.config)]
    found: dict[int, tuple[str, torch.nn.Module, object]] = {}
    for path, module in ctx.model.named_modules():
        config = getattr(module, "config", None)
        if isinstance(config, PretrainedConfig) and type(module).__module__.startswith("transformers."):
            found.setdefault(id(config), (path, module, config))
    return list(found.values())


def _route_attention(ctx: PatchContext) -> None:
    from transformers import PreTrainedModel

    name = ATTENTION[ctx.policy]
    for path, module, config in _attention_configs(ctx):
        implementation = config._attn_implementation
        if implementation != "sdpa":
            ctx.record(
                path,
                module,
                "torch",
                f"attention implementation {implementation!r}: only 'sdpa' is routed "
                "(load the model with attn_implementation='sdpa')",
            )
            continue
        _register_attention()
        if isinstance(module, PreTrainedModel):
            module.set_attn_implementation(name)
            ctx.on_undo(lambda module=module, was=implementation: module.set_attn_implementation(was))
        else:
            config._attn_implementation = name
            ctx.on_undo(lambda config=config, was=implementation: setattr(config, "_attn_implementation", was))
        ctx.record(
            path,
            module,
            "flash_attn",
            f"attention through transformers' AttentionInterface ({name!r}): "
            "its sdpa calls go to flash_attn where it takes them",
        )
