"""Problems for flash_attn, forward and backward: the Hypothesis strategy, the inputs a problem names, the
edge cases of a bucket, the CLI shape syntax, presets and the work a call does.

A problem is a dict: `batch`, `heads` (query heads), `kv_heads`, `nq`, `nk`, `head_dim`, `causal`, `scale`
(None: 1/sqrt(head_dim)), `magnitude` (the scale of q and k: 8 makes large logits, 0.01
near-uniform attention) and `layout` (how q, k, v, dO sit in memory).
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from autotune.gate.strategies import sizes
from autotune.search_spaces.flash_attn import MAX_HEAD_DIM, dims
from autotune.space import next_pow2
from autotune.spec import Cost, Inputs

HEAD_DIMS = (16, 32, 64, 80, 96, 128, 256)
"""The head dims the kernels are built for; 80 and 96 run padded to 128 with masked lanes."""
DRAWN_HEAD_DIMS = HEAD_DIMS + (8, 72)
"""Any head dim up to 256 works (padded to a power of two, at least 16); two odd ones are drawn too."""
GROUPS = (1, 1, 2, 3, 4)
"""Query heads per key/value head; 1 (no GQA) twice as often."""
LARGE = 8.0
"""The scale of q and k that makes large logits: a spread of ~64, most rows all but one-hot."""
BACKWARD_LARGE = 3.0
"""Large logits for the backward: a spread of ~9, rows up to 1 - 1e-6 on one key. Past that, a row's
gradients fall below the float32 rounding of the terms they are differences of (dP - delta, ~1e-7 of dP)
for every implementation, torch's included, and the gate would be ranking rounding noise."""
SCALES = (None, None, 0.05, 1.0)
"""None: sdpa's 1/sqrt(head_dim); custom scales beside it."""
LAYOUTS = ("contiguous", "bnhd", "padded")
"""(B, H, N, D) packed; the (B, N, H, D) buffer of a projection, transposed (rows H*D apart); rows padded by 8
elements (for head dims like 1 or 72 the row stride is not 16-byte aligned, so descriptors fall back)."""
PAD = 8


def problem(batch: int, heads: int, nq: int, head_dim: int, *, kv_heads: int | None = None, nk: int | None = None,
            causal: bool = False, scale: float | None = None, magnitude: float = 1.0, layout: str = "contiguous") -> dict:
    """A problem with the common choices filled in: no GQA, Nk = Nq, the default scale, contiguous."""
    return {
        "batch": batch, "heads": heads, "kv_heads": heads if kv_heads is None else kv_heads, "nq": nq,
        "nk": nq if nk is None else nk, "head_dim": head_dim, "causal": causal, "scale": scale,
        "magnitude": magnitude, "layout": layout,
    }


@st.composite
def _problem(draw: st.DrawFn, max_numel: int, large: float) -> dict:
    """Score elements (B * Hq * Nq * Nk) stay under max_numel: under the interpreter every block costs time."""
    group = draw(st.sampled_from(GROUPS))
    kv_heads = draw(st.integers(1, 2))
    heads = group * kv_heads
    budget = max(1, max_numel // heads)
    kind = draw(st.sampled_from(("square", "decode", "ragged")))
    if kind == "square":
        nq = nk = draw(sizes(math.isqrt(budget)))
    elif kind == "decode":  # a few new queries against a long cache
        nq = draw(st.integers(1, 3))
        nk = draw(sizes(budget // nq))
    else:  # prefill against a cache, or more queries than keys
        nq = draw(sizes(max(1, math.isqrt(budget) * 2)))
        nk = draw(sizes(max(1, budget // nq)))
    batch = draw(st.integers(1, max(1, min(3, budget // (nq * nk)))))
    if draw(st.integers(0, 11)) == 0:  # empty: no batch, no queries or no keys
        which = draw(st.sampled_from(("batch", "nq", "nk")))
        batch, nq, nk = (0 if which == "batch" else batch, 0 if which == "nq" else nq, 0 if which == "nk" else nk)
    return problem(
        batch, heads, nq, draw(st.sampled_from(DRAWN_HEAD_DIMS)), kv_heads=kv_heads, nk=nk,
        causal=draw(st.booleans()), scale=draw(st.sampled_from(SCALES)), magnitude=draw(st.sampled_from((1.0, 0.01, large))),
        layout=draw(st.sampled_from(LAYOUTS)),
    )


def problems(max_numel: int, large: float = LARGE) -> st.SearchStrategy[dict]:
    """Problems of at most max_numel score elements, edge cases first-class; q and k scaled by 1, by 0.01
    (near-uniform attention) or by `large`."""
    return _problem(max_numel, large)


def place(values: torch.Tensor, layout: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(B, H, N, D) values in dtype on device, laid out as named; made on the device, so strides survive."""
    b, h, n, d = values.shape
    if layout == "contiguous":
        return values.to(device=device, dtype=dtype)
    if layout == "bnhd":
        return torch.empty((b, n, h, d), dtype=dtype, device=device).transpose(1, 2).copy_(values)
    if layout == "padded":
        return torch.zeros((b, h, n, d + PAD), dtype=dtype, device=device)[..., :d].copy_(values)
    raise ValueError(f"layout {layout!r} is not one of {list(LAYOUTS)}")


def softmax_scale(prob: dict) -> float:
    return 1.0 / math.sqrt(prob["head_dim"]) if prob.get("scale") is None else float(prob["scale"])


def forward_inputs(prob: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    """q, k, v of a problem, and the call's options: is_causal, scale (resolved), enable_gqa."""
    gen = torch.Generator().manual_seed(seed)
    b, h, hk, nq, nk, d, _, causal = dims(prob)
    layout, magnitude = prob.get("layout", "contiguous"), prob.get("magnitude", 1.0)
    q = place(torch.randn((b, h, nq, d), generator=gen) * magnitude, layout, dtype, device)
    k = place(torch.randn((b, hk, nk, d), generator=gen) * magnitude, layout, dtype, device)
    v = place(torch.randn((b, hk, nk, d), generator=gen), layout, dtype, device)
    return {"q": q, "k": k, "v": v, "is_causal": causal, "scale": softmax_scale(prob), "enable_gqa": h != hk}


def parse_shape(text: str) -> dict:
    """'BxHxNxD' (Nq = Nk = N), 'BxH/HkxNq:NkxD' (grouped heads, a cache of Nk keys); '+causal' masks."""
    body, plus, suffix = text.strip().partition("+")
    if plus and suffix.strip().lower() != "causal":
        raise ValueError(f"shape {text!r}: the only suffix is '+causal', got '+{suffix}'")
    fields = body.lower().replace("*", "x").split("x")
    try:
        if len(fields) != 4:
            raise ValueError
        batch, heads_text, n_text, d = fields
        heads, _, kv = heads_text.partition("/")
        nq, _, nk = n_text.partition(":")
        out = problem(int(batch), int(heads), int(nq), int(d), kv_heads=int(kv) if kv else None,
                      nk=int(nk) if nk else None, causal=bool(plus))
    except ValueError:
        raise ValueError(f"shape {text!r}: expected BxHxNxD like 4x16x4096x128, or BxH/HkxNq:NkxD "
                         "like 2x16/4x1:32768x128, optionally +causal") from None
    if min(out["batch"], out["heads"], out["kv_heads"], out["nq"], out["nk"]) < 0:
        raise ValueError(f"shape {text!r}: sizes must be >= 0")
    if not 1 <= out["head_dim"] <= MAX_HEAD_DIM:
        raise ValueError(f"shape {text!r}: head dim must be in 1..{MAX_HEAD_DIM}, got {out['head_dim']}")
    if out["kv_heads"] < 1 or out["heads"] % out["kv_heads"]:
        raise ValueError(f"shape {text!r}: query heads must be a multiple of key/value heads")
    return out


TOKENS = 16384
PRESET_HEADS = 16
PRESET_LENGTHS = (1024, 2048, 4096, 8192, 16384)
PRESET_HEAD_DIMS = (64, 128)
PRESETS = [
    problem(TOKENS // n, PRESET_HEADS, n, d, causal=causal)
    for d in PRESET_HEAD_DIMS for causal in (False, True) for n in PRESET_LENGTHS
] + [parse_shape("16x16x1:4096x128"), parse_shape("2x16/4x1:32768x128")]
"""16k tokens (B = 16k / N) of 16 heads at head dims 64 and 128, causal and not, and two decode steps:
16 sequences against 4k keys, and 2 sequences of grouped heads against 32k."""
INTERPRETER_PRESETS = [problem(1, 2, 40, 32, causal=True), parse_shape("1x2/1x1:300x32")]


def bucket_edges(prob: dict, large: float = LARGE) -> list[dict]:
    """Problems a config tuned for prob's bucket must get right: the bucket's shortest and longest query and
    key lengths (never a block multiple) crossed so that Nq < Nk and Nq > Nk both occur, large logits,
    near-uniform attention, a custom scale, and the transposed and padded layouts; batch and heads as prob's."""
    b, h, hk, nq, nk, d, _, causal = dims(prob)

    def lengths(n: int) -> tuple[int, int]:
        top = next_pow2(n)
        return (top // 2 + 1, max(1, top - 1)) if top > 2 else (n, n)

    (nq_lo, nq_hi), (nk_lo, nk_hi) = lengths(nq), lengths(nk)
    common = dict(kv_heads=hk, causal=causal)
    return [
        problem(b, h, nq_lo, d, nk=nk_hi, magnitude=large, layout="bnhd", **common),
        problem(b, h, nq_hi, d, nk=nk_lo, scale=0.3, layout="padded", **common),
        problem(b, h, nq_hi, d, nk=nk_hi, magnitude=0.01, **common),
    ]


def _pairs(prob: dict) -> float:
    """Query-key pairs computed, as FlashAttention counts them: all of them, half when causal."""
    b, h, _, nq, nk, _, _, causal = dims(prob)
    return b * h * nq * nk * (0.5 if causal else 1.0)


def forward_cost(prob: dict, dtype: torch.dtype) -> Cost:
    """4 flops per pair and head-dim element (two matmuls); reads q, k, v, writes o and the log-sum-exp."""
    b, h, hk, nq, nk, d, _, _ = dims(prob)
    return Cost(flops=4 * _pairs(prob) * d, bytes=(2 * b * h * nq * d + 2 * b * hk * nk * d) * dtype.itemsize + 4 * b * h * nq)


def backward_cost(prob: dict, dtype: torch.dtype) -> Cost:
    """2.5 times the forward's flops (five matmuls to its two); reads q, k, v, o, dO and the log-sum-exp,
    writes dq, dk, dv."""
    b, h, hk, nq, nk, d, _, _ = dims(prob)
    return Cost(flops=10 * _pairs(prob) * d, bytes=(4 * b * h * nq * d + 4 * b * hk * nk * d) * dtype.itemsize + 4 * b * h * nq)
