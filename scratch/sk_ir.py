"""Compile linear bf16 (tma_stream_k 128x256x64) for sm_90 with Triton 3.6 and print the TTGIR's shared allocations and loops."""
import glob, os, re, sys, tempfile
sys.path.insert(0, "tests")
cache = tempfile.mkdtemp(); os.environ["TRITON_CACHE_DIR"] = cache
import hopper_compile as hc
sys.path.insert(0, ".ci/gpu-triton")
os.environ.pop("TRITON_INTERPRET", None)
from triton.runtime import driver
driver.set_active(hc.CompileOnlyHopperDriver())
import warnings; warnings.filterwarnings("ignore")
import torch
from autotune import registry
from autotune.verify import outputs_like
variant = sys.argv[1]
base = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1, "num_warps": 8, "num_stages": 3, "variant": variant}
spec = registry.get("linear")
problem = dict(spec.interpreter_presets[0], m=512, k=512, n=512)
inputs = spec.make_inputs(problem, torch.bfloat16, torch.device("cpu"), 0)
spec.launch(inputs, base, outputs_like(spec.baseline(inputs)))
for f in glob.glob(cache + "/*/_gemm_kernel.ttgir"):
    text = open(f).read()
    print(f)
    for line in text.splitlines():
        if re.search(r"local_alloc|scf.for|scf.while|async_tma_copy|warp_group_dot |wait_barrier|tt.descriptor_load", line):
            print(line.strip()[:200])
