"""The GEMM family's calls on the Gluon engine (search_spaces/gemm_gluon.py): why a config with engine="gluon" cannot
run a call (`matmul_refuses`, `linear_refuses`, `gated_refuses`; None for a Triton config), its launch on the Hopper
GEMM (hopper_gemm.py), and the problems the gate checks its configs on (`aligned_problems`).

A call the bucket's Gluon config cannot run (a bias, an activation, a view TMA cannot read, sizes off 16 bytes)
takes the best stored Triton config: the launchers ask `TunedConfigs.config_among(..., "triton", is_triton)`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch
from hypothesis import strategies as st

from autotune import runtime
from autotune.kernels.gemm import hopper_gemm
from autotune.search_spaces import gemm_gluon as engines
from autotune.space import Config
from autotune.spec import DTYPE_NAMES

is_triton = engines.is_triton


def routed(table: runtime.TunedConfigs, key: Hashable, config: Callable[[], Config],
           plan: Callable[[Config], Any]) -> Any:
    """What a call of this kind (`key`) launches, derived once per key: plan(its bucket's config) for a Triton config,
    else that Gluon config itself (the caller checks each call's tensors: `*_refuses`)."""

    def make() -> Any:
        found = config()
        return plan(found) if is_triton(found) else found

    return table.derived(key, make)


def triton_config(table: runtime.TunedConfigs, dtype: torch.dtype, sizes: dict) -> Config:
    """The best stored Triton config of the bucket of a call of these sizes (its problem at run time, less the
    dtype): for a call its bucket's Gluon config cannot run."""
    problem = {**sizes, "dtype": DTYPE_NAMES[dtype]}
    return table.config_among(dtype, table.spec.bucket(problem), lambda: problem, "triton", is_triton)


def triton_plan(table: runtime.TunedConfigs, key: Hashable, triton_config: Callable[[], Config],
                plan: Callable[[Config], Any]) -> Any:
    """plan(the best stored Triton config), derived once per key: for a call its bucket's Gluon config cannot run."""
    return table.derived((*key, "triton"), lambda: plan(triton_config()))


def _sizes_refuse(*sizes: int) -> str | None:
    """The sizes the gate checks Gluon configs on (`aligned_problems`): each a multiple of 16 bytes of a half type."""
    if any(size % engines.ALIGNED for size in sizes):
        return f"M, N and K must be multiples of {engines.ALIGNED} (16 bytes), got {sizes}"
    return None


def matmul_refuses(a: torch.Tensor, b: torch.Tensor, config: Config) -> str | None:
    """Why config cannot run a (M, K) @ b (K, N), or None (always for the Triton engine)."""
    if is_triton(config):
        return None
    return _sizes_refuse(a.shape[0], b.shape[1], a.shape[1]) or hopper_gemm.supported(
        a, b, engines.kernel_config(config)
    )


def linear_refuses(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str,
                   save_pre: bool, config: Config) -> str | None:
    """Why config cannot run linear's x (M, K) @ weight (N, K).T: a bias, an activation or the pre-activation to
    store, or what matmul_refuses says."""
    if is_triton(config):
        return None
    if bias is not None or activation != "none" or save_pre:
        return "the Gluon GEMM adds no bias and applies no activation"
    return matmul_refuses(x, weight.t(), config)


def gated_refuses(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, b_gate: torch.Tensor | None,
                  b_up: torch.Tensor | None, activation: str, config: Config) -> str | None:
    """Why config cannot run the gated GEMM act(x @ w_gate.T) * (x @ w_up.T) of gated_mlp (biases, sizes, layouts:
    hopper_gemm.gated_supported), or None (always for the Triton engine)."""
    if is_triton(config):
        return None
    if b_gate is not None or b_up is not None:
        return "the Gluon gated GEMM adds no biases"
    if x.shape[1] == 0:
        return "K = 0: nothing for TMA to read"
    return _sizes_refuse(x.shape[0], w_gate.shape[0], x.shape[1]) or hopper_gemm.gated_supported(
        x, w_gate, w_up, activation, engines.kernel_config(config)
    )


def launch_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, config: Config,
                  table: runtime.TunedConfigs | None = None) -> None:
    """c (M, N, contiguous) = a @ b on the Gluon GEMM, unchecked (see matmul_refuses); a public call passes its
    runtime table, which keeps the launch bound (`launch.kept`)."""
    hopper_gemm.launch_matmul(a, b, c, engines.kernel_config(config), table)


def run_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, config: Config, name: str = "matmul") -> None:
    """launch_matmul where the config can run it; ValueError naming why (and the kernel, `name`) where not."""
    if (reason := matmul_refuses(a, b, config)) is not None:
        raise ValueError(f"{name}: engine=gluon cannot run this call: {reason}")
    launch_matmul(a, b, c, config)


def launch_gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, h: torch.Tensor, gu: torch.Tensor | None,
                 activation: str, config: Config, table: runtime.TunedConfigs | None = None) -> None:
    """h = act(x @ w_gate.T) * (x @ w_up.T), and [g | u] into gu where given, on the Gluon GEMM, unchecked (see
    gated_refuses); `table` as launch_matmul's."""
    hopper_gemm.launch_gated(x, w_gate, w_up, h, gu, activation, engines.kernel_config(config), table)


def run_gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, h: torch.Tensor, gu: torch.Tensor | None,
              activation: str, config: Config) -> None:
    """h = act(x @ w_gate.T) * (x @ w_up.T), and [g | u] into gu where given, on the Gluon GEMM; ValueError where
    the config cannot run it."""
    if (reason := gated_refuses(x, w_gate, w_up, None, None, activation, config)) is not None:
        raise ValueError(f"gated_mlp: engine=gluon cannot run this call: {reason}")
    launch_gated(x, w_gate, w_up, h, gu, activation, config)


def _aligned(problem: dict, sizes: tuple[str, ...], plain: bool) -> dict:
    """problem as the Gluon kernel takes it: its sizes rounded up to multiples of 16 bytes (the same power-of-two
    class from 8 on), no sliced operand, no batch and, for a plain product, no bias or activation."""
    out = {**problem, **{d: -(-problem[d] // engines.ALIGNED) * engines.ALIGNED or engines.ALIGNED for d in sizes}}
    out.update({key: "contiguous" for key in engines.LAYOUT_KEYS if out.get(key) == "sliced"})
    if "lead" in out:
        out["lead"] = []
    if out.get("batch", 0) > 1:
        out.update(batch=0, broadcast="none")
    if "bias" in out and (plain or out["bias"]):
        out["bias"] = False
    if plain and "activation" in out:
        out["activation"] = "none"
    return out


def aligned_problems(strategy: st.SearchStrategy[dict], config: Config, sizes: tuple[str, ...],
                     plain: bool = True) -> st.SearchStrategy[dict]:
    """strategy, for a Gluon config the problems made ones it takes (`_aligned`): the gate's draws would otherwise
    be almost all off 16 bytes, each rejected; unchanged for a Triton config."""
    if is_triton(config):
        return strategy
    return strategy.map(lambda problem: _aligned(problem, sizes, plain))
