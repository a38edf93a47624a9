"""What `autotune bench --against` may compare a kernel with: every kernel with its default config, PyTorch eager,
torch.compile and a device copy of its bytes; the matmul family with its vendor library call; softmax and the norms
with Liger-Kernel's ops; flash_attn with torch's scaled_dot_product_attention and each of its backends."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.measure import attention_peers, peers
from autotune.runtime import registry

AGAINST = ("default", "torch", "compile", "vendor", "liger", "copy", *attention_peers.PEERS)
"""What the tuned kernel can be compared against, in the order the report shows them."""


def applies(peer: str, kernel: str) -> bool:
    """Whether `peer` has something to run for kernel `kernel`."""
    if peer == "vendor":
        return registry.get(kernel).vendor is not None
    if peer == "liger":
        return kernel in peers.LIGER_KERNELS
    if peer in attention_peers.PEERS:
        return kernel in attention_peers.KERNELS
    return peer in AGAINST


def allowed(kernel: str) -> list[str]:
    """The peers kernel `kernel` can be compared against."""
    return [peer for peer in AGAINST if applies(peer, kernel)]


def parse_against(text: str, kernels: Sequence[str] = ()) -> list[str]:
    """'torch,compile,default' -> ['default', 'torch', 'compile'] (in AGAINST's order). ValueError for a name that
    is no peer, or one that applies to none of `kernels` (naming the peers each of them has); a peer that applies
    to some of them is left out, for the others, when measured."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in AGAINST for n in names):
        raise ValueError(f"--against {text!r}: expected a comma-separated list of {', '.join(AGAINST)}")
    for name in names:
        if kernels and not any(applies(name, kernel) for kernel in kernels):
            hint = (
                "; sdpa's forward + backward is timed against flash_attn's: autotune bench flash_attn --backward"
                if name in attention_peers.PEERS and "flash_attn_backward" in kernels
                else ""
            )
            each = "; ".join(f"{kernel}'s: {', '.join(allowed(kernel))}" for kernel in kernels)
            raise ValueError(f"--against {name}: not a peer of {' or '.join(kernels)} (peers: {each}){hint}")
    return [n for n in AGAINST if n in names]
