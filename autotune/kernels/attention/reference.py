"""Attention in PyTorch: the float64 references and the same-dtype baselines the gate compares flash_attn
with. The float64 math runs a batch element and a chunk of queries at a time, so no score block exceeds
CHUNK_ELEMENTS (a 16k x 16k attention of 16 heads would otherwise need 34 GB)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from autotune.kernels.attention.tiles import compute_dtype

CHUNK_ELEMENTS = 1 << 25
"""Score elements per chunk: 256 MB in float64."""


def _chunks(heads: int, nq: int, nk: int) -> Iterator[tuple[int, int]]:
    rows = max(1, CHUNK_ELEMENTS // max(1, heads * nk))
    for start in range(0, nq, rows):
        yield start, min(nq, start + rows)


def _heads(t: torch.Tensor, group: int) -> torch.Tensor:
    """Key/value heads repeated for their query heads, as sdpa's enable_gqa does (head h reads h // group)."""
    return t if group == 1 else t.repeat_interleave(group, dim=-3)


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool, start: int) -> torch.Tensor:
    """(H, rows, Nk) scaled scores of queries start.. against all keys in float32 or float64; with causal
    masking aligned top-left, as sdpa aligns it: query i sees keys 0..i, whatever Nq and Nk are."""
    s = (q @ k.transpose(-1, -2)).to(torch.float64 if q.dtype == torch.float64 else torch.float32) * scale
    if causal:
        rows = torch.arange(start, start + q.shape[-2], device=q.device)[:, None]
        s = s.masked_fill(torch.arange(k.shape[-2], device=q.device)[None, :] > rows, float("-inf"))
    return s


def _group(q: torch.Tensor, k: torch.Tensor) -> int:
    return q.shape[1] // k.shape[1]


def _score_chunks(inputs: dict) -> Iterator[tuple[int, int, int, torch.Tensor, torch.Tensor]]:
    """(batch element, first query, end query, float64 scores of those queries, their values) chunk by chunk."""
    q, k, v = (inputs[n].to(torch.float64) for n in ("q", "k", "v"))
    group = _group(q, k)
    for i in range(q.shape[0]):
        k_i, v_i = _heads(k[i], group), _heads(v[i], group)
        for start, end in _chunks(q.shape[1], q.shape[2], k.shape[2]):
            yield i, start, end, _scores(q[i, :, start:end], k_i, inputs["scale"], inputs["is_causal"], start), v_i


def reference_forward(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, natural log-sum-exp of each query's scores) in float64."""
    q = inputs["q"]
    o = q.new_zeros(q.shape, dtype=torch.float64)
    lse = q.new_full(q.shape[:3], float("-inf"), dtype=torch.float64)
    for i, start, end, s, v_i in _score_chunks(inputs):
        lse[i, :, start:end] = torch.logsumexp(s, -1)
        o[i, :, start:end] = torch.softmax(s, -1) @ v_i  # no keys: an empty sum, 0 as in sdpa
    return o, lse


def forward_floor(inputs: dict) -> tuple[torch.Tensor, None]:
    """Error floor of o (see verify's error_floor): each output element is a sum of P_ij * v_jd, and where
    those terms cancel (two nearly tied keys with opposite values) the leftover is far smaller than they
    are, while the rounding of the scores errs in proportion to the terms. The floor is the typical size
    of such a sum of random sign, the root of the summed squared terms: sqrt(P^2 @ V^2). The log-sum-exp
    has none."""
    q = inputs["q"]
    floor = q.new_zeros(q.shape, dtype=torch.float64)
    for i, start, end, s, v_i in _score_chunks(inputs):
        floor[i, :, start:end] = (torch.softmax(s, -1).square() @ v_i.square()).sqrt()
    return floor.nan_to_num(0.0), None


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, inputs: dict) -> torch.Tensor:
    """sdpa in the working dtype, grouped heads repeated first: with enable_gqa torch picks its math
    backend for some shapes (on the CPU, Nq = 1) and its flash backend for others, and the two round so
    differently that the budget would jump between them."""
    group = _group(q, k)
    return F.scaled_dot_product_attention(q, _heads(k, group), _heads(v, group), is_causal=inputs["is_causal"],
                                          scale=inputs["scale"])


def _nothing_to_attend(q: torch.Tensor, k: torch.Tensor) -> bool:
    """No query row (no batch, heads or queries) or no key. sdpa's CUDA backends have handled such inputs
    each their own way across torch versions (flash and cuDNN refused an empty batch in torch 2.4,
    pytorch#133780), so the baselines give the defined result themselves: an empty output, or with no keys
    an empty sum (0, log-sum-exp -inf), and no gradient."""
    return q.numel() == 0 or k.shape[2] == 0


def baseline_forward(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """torch in the working dtype: sdpa's output, and the log-sum-exp (in the dtype flash_attn keeps it)
    of scores computed by a matmul in the working dtype."""
    q, k = inputs["q"], inputs["k"]
    b, h, nq, _ = q.shape
    lse = q.new_full((b, h, nq), float("-inf"), dtype=compute_dtype(q.dtype))
    if _nothing_to_attend(q, k):
        return torch.zeros_like(q), lse
    o = _sdpa(q, k, inputs["v"], inputs)
    for i in range(b):
        k_i = _heads(k[i], _group(q, k))
        for start, end in _chunks(h, nq, k.shape[2]):
            lse[i, :, start:end] = torch.logsumexp(_scores(q[i, :, start:end], k_i, inputs["scale"], inputs["is_causal"], start), -1)
    return o, lse


def reference_backward(inputs: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) in float64, from q, k, v and dO alone (the forward recomputed exactly); dk and dv summed
    over each key/value head's query heads."""
    q, k, v, do = (inputs[n].to(torch.float64) for n in ("q", "k", "v", "do"))
    group, scale = _group(q, k), inputs["scale"]
    b, h, nq, d = q.shape
    nk = k.shape[2]
    dq = torch.zeros_like(q)
    dk = q.new_zeros((b, h, nk, d))
    dv = q.new_zeros((b, h, nk, d))
    for i in range(b):
        k_i, v_i = _heads(k[i], group), _heads(v[i], group)
        for start, end in _chunks(h, nq, nk):
            if nk == 0:
                break
            q_c, do_c = q[i, :, start:end], do[i, :, start:end]
            p = torch.softmax(_scores(q_c, k_i, scale, inputs["is_causal"], start), -1)
            delta = (do_c * (p @ v_i)).sum(-1, keepdim=True)
            ds = p * (do_c @ v_i.transpose(-1, -2) - delta)
            dq[i, :, start:end] = ds @ k_i * scale
            dk[i] += ds.transpose(-1, -2) @ q_c * scale
            dv[i] += p.transpose(-1, -2) @ do_c
    kv_heads = k.shape[1]
    return dq, dk.view(b, kv_heads, group, nk, d).sum(2), dv.view(b, kv_heads, group, nk, d).sum(2)


def baseline_backward(inputs: dict) -> tuple[torch.Tensor, ...]:
    """torch in the working dtype: autograd through sdpa (its forward included, which it recomputes)."""
    if _nothing_to_attend(inputs["q"], inputs["k"]):
        return tuple(torch.zeros_like(inputs[n]) for n in ("q", "k", "v"))
    leaves = [inputs[n].detach().requires_grad_() for n in ("q", "k", "v")]
    with torch.enable_grad():
        o = _sdpa(*leaves, inputs)
        grads = torch.autograd.grad(o, leaves, inputs["do"], allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, leaves))
