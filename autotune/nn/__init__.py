"""Drop-in modules over the tuned kernels: torch's constructor arguments, parameters and state_dict keys (each is a
subclass of its torch module where torch has one), so a checkpoint loads either way.

Each falls back to torch where its kernel does not take a call (`fallbacks()` counts why). Their `policy` says
when a supported call runs the kernels: "always" (the default for modules built directly) or "measured", only
where the stored rows show the kernels at least as fast as torch for this GPU, dtype and shape bucket
(`decisions()` lists what was decided and on what evidence); `autotune.patch` uses "measured" unless forced."""

from autotune.nn.attention import route_sdpa, scaled_dot_product_attention
from autotune.nn.linear import MLP, GatedMLP, Linear
from autotune.nn.norms import GroupNorm, LayerNorm, RMSNorm
from autotune.nn.routing import POLICIES, Decision, clear, decisions, fallbacks

__all__ = [
    "MLP",
    "POLICIES",
    "Decision",
    "GatedMLP",
    "GroupNorm",
    "LayerNorm",
    "Linear",
    "RMSNorm",
    "clear",
    "decisions",
    "fallbacks",
    "route_sdpa",
    "scaled_dot_product_attention",
]
