"""Same process: the GQA decode bucket's shipped configs (P split) against call G's (P rounded), graph medians,
each timed in order and in reverse (bench.kernel_ms of flash_attn.launch on one problem's inputs)."""
import importlib
import statistics
import torch
from autotune import bench
from autotune.kernels._attn_problems import forward_inputs, problem
fa = importlib.import_module("autotune.kernels.flash_attn")
BASE = {"BLOCK_M": 16, "BLOCK_N": 64, "gqa": "packed", "mask": "every"}
OLD = {**BASE, "KV_SPLITS": 32, "kv_load": "pointer", "num_stages": 2, "num_warps": 2, "p": "split"}
NEW = {torch.bfloat16: {**BASE, "KV_SPLITS": 32, "kv_load": "descriptor", "num_stages": 2, "num_warps": 2, "p": "rounded"},
       torch.float16: {**BASE, "KV_SPLITS": 8, "kv_load": "descriptor", "num_stages": 4, "num_warps": 4, "p": "rounded"}}
p = problem(2, 16, 1, 128, kv_heads=4, nk=32768)
for dtype in (torch.bfloat16, torch.float16):
    inputs = forward_inputs(p, dtype, torch.device("cuda"), 0)
    out = fa.SPEC.baseline(inputs)
    out = (torch.empty_like(out[0]), torch.empty_like(out[1])) if isinstance(out, tuple) else out
    times = {"shipped (split)": [], "call G (rounded)": []}
    for order in (0, 1, 0, 1):
        pairs = [("shipped (split)", OLD), ("call G (rounded)", NEW[dtype])]
        for name, cfg in (pairs if order == 0 else pairs[::-1]):
            times[name].append(bench.graph_ms(lambda cfg=cfg: fa.SPEC.launch(inputs, cfg, out)))
    old, new = statistics.median(times["shipped (split)"]), statistics.median(times["call G (rounded)"])
    print(f"{dtype}: shipped {old:.5f} ms {times['shipped (split)']}, call G {new:.5f} ms {times['call G (rounded)']}, "
          f"shipped / new {old / new:.3f}", flush=True)
