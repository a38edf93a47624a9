"""Do the P-rounded configs the GQA decode re-search found (call G) pass long-decode problems of their bucket that
the search's draws may have missed? check_problem over seeds, Nk in the bucket, magnitudes 1, 4, 8, head dim 128,
GQA 16/4 and 1 query; the shipped P-split configs beside them."""
import itertools, sys, time
import torch
from autotune.kernels import flash_attn as _  # noqa
import importlib
fa = importlib.import_module("autotune.kernels.flash_attn")
from autotune.kernels._attn_problems import problem
from autotune.verify import check_problem, ReferenceCache

BASE = {"BLOCK_M": 16, "BLOCK_N": 64, "gqa": "packed", "mask": "every"}
CONFIGS = {
    "bf16 new (rounded)": (torch.bfloat16, {**BASE, "KV_SPLITS": 32, "kv_load": "descriptor", "num_stages": 2, "num_warps": 2, "p": "rounded"}),
    "bf16 shipped (split)": (torch.bfloat16, {**BASE, "KV_SPLITS": 32, "kv_load": "pointer", "num_stages": 2, "num_warps": 2, "p": "split"}),
    "fp16 new (rounded)": (torch.float16, {**BASE, "KV_SPLITS": 8, "kv_load": "descriptor", "num_stages": 4, "num_warps": 4, "p": "rounded"}),
    "fp16 shipped (split)": (torch.float16, {**BASE, "KV_SPLITS": 32, "kv_load": "pointer", "num_stages": 2, "num_warps": 2, "p": "split"}),
}
seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 12
probs = [problem(2, 16, 1, 128, kv_heads=4, nk=nk, magnitude=m) for nk in (16385, 24001, 32767) for m in (1.0, 4.0, 8.0)]
for name, (dtype, cfg) in CONFIGS.items():
    cache, fails, n, t0 = ReferenceCache(), [], 0, time.time()
    for p, s in itertools.product(probs, range(seeds)):
        f = check_problem(fa.SPEC, cfg, p, dtype, seed=s, cache=cache)
        n += 1
        if f is not None:
            fails.append(f"nk={p['nk']} magnitude={p['magnitude']} seed={s}: {f.reason}")
    print(f"{name}: {len(fails)} of {n} fail ({time.time() - t0:.0f} s)", flush=True)
    for line in fails[:6]:
        print("   ", line, flush=True)
