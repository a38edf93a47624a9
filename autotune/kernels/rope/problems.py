"""Problems for rope and rope_backward: the Hypothesis strategy, the inputs a problem names, the eager formula
(float64 reference and same-dtype baseline), the CLI shape syntax, the bytes a call must move and a bucket's edges.

A problem is a dict: `batch`, `heads` (H), `kv_heads` (Hk, which may differ: grouped-query attention), `seq` (N),
`head_dim` (D, even), `cos_batch` (1: one cos/sin for every sequence; else the batch), `layout` (how q and k sit in
memory), `values` ("rotary": cos and sin of real positions, as transformers' rotary embedding makes them;
"random": any numbers, the two halves of a row unrelated) and `magnitude`.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from autotune.gate.strategies import magnitudes, sizes
from autotune.search_spaces.rope import dims
from autotune.spec import Cost, Inputs

HEAD_DIMS = (2, 4, 6, 10, 34, 64, 80, 96, 128)
"""Even head dims: the smallest, halves that are not powers of two (3, 5, 17, 40, 48) and real models' (64, 128)."""
LAYOUTS = ("contiguous", "transposed", "fused", "strided")
"""How q and k sit in memory: (B, H, N, D) packed; the transpose of a projection's (B, N, H, D) output (the view a
transformers attention makes); a slice of one fused (B, N, H + 2 Hk, D) projection; every other element of the head
dim (not unit stride: the kernel gets a copy)."""
VALUES = ("rotary", "random")
ROTARY_BASE = 10000.0


def problem(batch: int, heads: int, seq: int, head_dim: int, *, kv_heads: int | None = None, cos_batch: int = 1,
            layout: str = "contiguous", values: str = "rotary", magnitude: float = 1.0) -> dict:
    """A problem with the common choices filled in: Hk = H, one cos/sin for all sequences, packed, real angles."""
    return {"batch": batch, "heads": heads, "kv_heads": heads if kv_heads is None else kv_heads, "seq": seq,
            "head_dim": head_dim, "cos_batch": cos_batch, "layout": layout, "values": values, "magnitude": magnitude}


def problems(max_numel: int) -> st.SearchStrategy[dict]:
    """Problems whose q and k hold at most max_numel elements together, edge cases first-class."""

    @st.composite
    def draw(d: st.DrawFn) -> dict:
        head_dim = d(st.sampled_from([h for h in HEAD_DIMS if 2 * h <= max_numel] or [2]))
        heads = d(st.integers(1, 5))
        kv_heads = d(st.one_of(st.just(heads), st.integers(1, 4)))
        per_row = (heads + kv_heads) * head_dim
        batch = d(st.integers(1, 3))
        seq = d(sizes(max(1, max_numel // (per_row * batch))))
        return problem(batch, heads, max(seq, 1), head_dim, kv_heads=kv_heads,
                       cos_batch=d(st.sampled_from(sorted({1, batch}))), layout=d(st.sampled_from(LAYOUTS)),
                       values=d(st.sampled_from(VALUES)), magnitude=d(magnitudes()))

    return draw()


def _heads(values: torch.Tensor, layout: str, offset: int, width: int, dtype, device) -> torch.Tensor:
    """values (B, H, N, D) on device in dtype, as a (B, H, N, D) view laid out as named. Made on the device, last:
    a move would make a strided view contiguous."""
    b, h, n, d = values.shape
    if layout == "transposed":
        return values.transpose(1, 2).to(device=device, dtype=dtype).contiguous().transpose(1, 2)
    if layout == "fused":  # heads [offset, offset + h) of a projection of `width` heads
        base = torch.zeros(b, n, width, d, dtype=dtype, device=device)
        view = base[:, :, offset : offset + h].transpose(1, 2)
        return view.copy_(values)
    if layout == "strided":
        return torch.zeros(b, h, n, 2 * d, dtype=dtype, device=device)[..., ::2].copy_(values)
    return values.to(device=device, dtype=dtype).contiguous()


def _cos_sin(prob: dict, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    b, _, _, n, d = dims(prob)
    rows = prob.get("cos_batch", 1)
    if prob.get("values", "rotary") == "random":
        return (torch.rand(rows, n, d, generator=gen) * 2 - 1, torch.rand(rows, n, d, generator=gen) * 2 - 1)
    # As transformers' LlamaRotaryEmbedding: angles position * inv_freq, the frequencies repeated over both halves;
    # each sequence starts at its own offset (a batch of cos/sin from different position_ids).
    inv_freq = 1.0 / ROTARY_BASE ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    starts = torch.randint(0, 4096, (rows, 1), generator=gen).double()
    freqs = (starts + torch.arange(n, dtype=torch.float64))[..., None] * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos(), angles.sin()


def forward_inputs(prob: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    """q (B, H, N, D), k (B, Hk, N, D) in the problem's layout; cos and sin (cos_batch, N, D), contiguous."""
    gen = torch.Generator().manual_seed(seed)
    b, h, hk, n, d = dims(prob)
    scale = prob.get("magnitude", 1.0)
    layout = prob.get("layout", "contiguous")
    width = h + 2 * hk
    q = _heads(torch.randn(b, h, n, d, generator=gen) * scale, layout, 0, width, dtype, device)
    k = _heads(torch.randn(b, hk, n, d, generator=gen) * scale, layout, h, width, dtype, device)
    cos, sin = (t.to(device=device, dtype=dtype) for t in _cos_sin(prob, gen))
    return {"q": q, "k": k, "cos": cos, "sin": sin}


def backward_inputs(prob: dict, dtype: torch.dtype, device: torch.device, seed: int) -> Inputs:
    """The forward's inputs and the gradients of its outputs, dq and dk, in the same layout as q and k."""
    inputs = forward_inputs(prob, dtype, device, seed)
    grads = forward_inputs({**prob, "magnitude": 1.0}, dtype, device, seed + 1)
    return {**inputs, "dq": grads["q"], "dk": grads["k"]}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """transformers' rotate_half: (x1, x2) -> (-x2, x1) over the halves of the last dim."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def eager(q, k, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' apply_rotary_pos_emb (unsqueeze_dim=1) in torch ops."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def forward_torch(inputs: Inputs, dtype: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The eager formula in dtype (None: the inputs' own)."""
    q, k, cos, sin = (inputs[name] if dtype is None else inputs[name].to(dtype) for name in ("q", "k", "cos", "sin"))
    return eager(q, k, cos, sin)


def backward_torch(inputs: Inputs, dtype: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(dq, dk): autograd's backward of the eager formula in dtype (None: the inputs' own), its forward included."""
    def cast(t):
        return t if dtype is None else t.to(dtype)

    q, k = cast(inputs["q"]).detach().requires_grad_(), cast(inputs["k"]).detach().requires_grad_()
    with torch.enable_grad():
        outs = eager(q, k, cast(inputs["cos"]), cast(inputs["sin"]))
        return torch.autograd.grad(outs, (q, k), (cast(inputs["dq"]), cast(inputs["dk"])))


def parse_shape(text: str) -> dict:
    """'BxHxNxD' (Hk = H) or 'BxH/HkxNxD' (grouped key heads), like flash_attn's: '1x32/8x4096x128'."""
    fields = text.strip().lower().replace("*", "x").split("x")
    try:
        if len(fields) != 4:
            raise ValueError
        batch, heads_text, seq, head_dim = fields
        heads, _, kv = heads_text.partition("/")
        out = problem(int(batch), int(heads), int(seq), int(head_dim), kv_heads=int(kv) if kv else None)
    except ValueError:
        raise ValueError(f"shape {text!r}: expected BxHxNxD like 1x32x4096x128, or BxH/HkxNxD like 1x32/8x4096x128"
                         ) from None
    if min(out["batch"], out["heads"], out["kv_heads"], out["seq"]) < 1:
        raise ValueError(f"shape {text!r}: batch, heads and positions must be >= 1")
    if out["head_dim"] < 2 or out["head_dim"] % 2:
        raise ValueError(f"shape {text!r}: the head dim must be even (rotate_half splits it in two), got {out['head_dim']}")
    return out


def cost(prob: dict, dtype: torch.dtype) -> Cost:
    """Reads q, k, cos and sin; writes q' and k' (the backward: reads dq', dk', cos, sin; writes dq, dk)."""
    b, h, hk, n, d = dims(prob)
    heads = b * (h + hk) * n * d
    angles = 2 * prob.get("cos_batch", 1) * n * d
    return Cost(flops=3 * heads, bytes=(2 * heads + angles) * dtype.itemsize)


def bucket_edges(prob: dict) -> list[dict]:
    """Problems a config tuned for prob's bucket must get right: its heads and head dim at a few positions (one,
    a prime, its own count), in every layout, with a cos/sin per sequence and random angles."""
    _, h, hk, n, d = dims(prob)
    edges = []
    for i, layout in enumerate(LAYOUTS):
        seq = (1, 7, min(n, 33), 3)[i]
        edges.append(problem(2 if i % 2 else 1, h, seq, d, kv_heads=hk, cos_batch=2 if i == 1 else 1,
                             layout=layout, values=VALUES[i % 2], magnitude=(1.0, 1e3, 1e-3, 1.0)[i]))
    return edges


PRESETS = [parse_shape(s) for s in ("1x32/8x4096x128", "4x32/8x2048x128")]
"""Llama-3-8B's attention: 32 query and 8 key heads of 128, one sequence of 4096 and four of 2048."""
INTERPRETER_PRESETS = [problem(1, 3, 9, 10, kv_heads=2, layout="transposed")]
