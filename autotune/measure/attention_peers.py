"""torch's scaled_dot_product_attention as flash_attn's peer in a same-run comparison: sdpa with one backend forced
(sdpa_kernel) or none (what a model calling sdpa gets), on flash_attn's inputs as they are: (B, H, N, D) q, k, v,
grouped heads by enable_gqa (no repeated copies), causal masks aligned top-left as in both, flash_attn's scale."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from autotune.measure.peers import PeerUnavailable, training_step
from autotune.space import Problem
from autotune.spec import Inputs

BACKENDS = {
    "sdpa-flash": SDPBackend.FLASH_ATTENTION,
    "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa-math": SDPBackend.MATH,
    "sdpa-default": None,
}
"""Each peer's forced backend: FlashAttention-2 on CUDA (torch's own flash kernel on the CPU), cuDNN's fused
attention, the memory-efficient kernel, the math (unfused) path; sdpa-default forces none."""
PEERS = tuple(BACKENDS)
KERNELS = ("flash_attn",)
"""The kernels sdpa is compared with: flash_attn's forward, and with `backward` its training step."""
CUDA_ONLY = {"sdpa-cudnn": "cuDNN", "sdpa-efficient": "memory-efficient"}
"""Backends torch has no CPU kernel of."""
DECODE_KERNELS = ("flash_attn", "flash_attn_backward")
NOTE = (
    "sdpa-X: torch's scaled_dot_product_attention with its X backend forced (sdpa_kernel; flash is "
    "FlashAttention-2 on CUDA), sdpa-default with none forced (what a model calling sdpa gets); unsupported: the "
    "backend refused the case (torch's reason in the notes). TFLOP/s as FlashAttention counts them: "
    "4*B*H*Nq*Nk*D forward, half when causal, the backward 2.5x that; decode steps (Nq = 1) in GB/s of the "
    "fewest bytes (q, k, v read, o written)"
)


def rate_bound(kernel: str, problem: Problem, bound: str) -> str:
    """The roofline a case is judged against: `bound`, but memory for an attention decode step (Nq = 1), which
    reads the whole cache for a few flops per byte."""
    return "memory" if kernel in DECODE_KERNELS and problem.get("nq") == 1 else bound


def sdpa_function(peer: str, inputs: Inputs) -> Callable[[Inputs], torch.Tensor]:
    """peer's sdpa call on flash_attn's inputs (q, k, v, is_causal, scale, enable_gqa); PeerUnavailable where
    torch has no kernel of the forced backend on this device."""
    if peer not in BACKENDS:
        raise ValueError(f"peer {peer!r}: expected one of {', '.join(PEERS)}")
    device = inputs["q"].device
    if peer in CUDA_ONLY and device.type != "cuda":
        raise PeerUnavailable(f"torch has no {CUDA_ONLY[peer]} attention kernel on {device.type} (CUDA only)")
    backend = BACKENDS[peer]

    def sdpa(i: Inputs) -> torch.Tensor:
        # enable_gqa only where heads are grouped: torch 2.4's sdpa has no such argument.
        gqa = {"enable_gqa": True} if i["enable_gqa"] else {}
        with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
            return F.scaled_dot_product_attention(
                i["q"], i["k"], i["v"], is_causal=i["is_causal"], scale=i["scale"], **gqa
            )

    return sdpa


def sdpa_call(peer: str, inputs: Inputs, backward: bool = False) -> Callable[[], object]:
    """What the bench times for peer: one forward on `inputs`, or with `backward` one training step (forward and
    backward through autograd, as `peers.training_step` runs it), after one run outside the timing;
    PeerUnavailable with torch's reason where the backend refuses these inputs (a head dim, GQA, a causal
    mask with Nq != Nk, a dtype). Any other failure is left for the timing to record as an error."""
    fn = sdpa_function(peer, inputs)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            call = training_step(fn, inputs) if backward else (lambda: fn(inputs))
            call()
            return call
        except Exception as exc:
            if isinstance(exc, RuntimeError) and not isinstance(exc, torch.cuda.OutOfMemoryError):
                raise PeerUnavailable(_reason(exc, seen)) from None
            failure = exc

    def failing() -> None:
        raise failure

    return failing


def _reason(exc: RuntimeError, seen: list[warnings.WarningMessage]) -> str:
    """torch's refusal in one line: the error, then the warnings in which sdpa says why each backend was not used."""
    said = [re.sub(r"\s*\(Triggered internally at .*", "", str(w.message), flags=re.S).strip() for w in seen]
    text = " ".join(
        dict.fromkeys(
            [str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, *filter(None, said)]
        )
    )
    return text[:400]
