"""Compile linear bf16 configs for sm_90 with Triton 3.6 (no GPU) and print ptxas -v of each _gemm_kernel."""
import glob, json, os, subprocess, sys, tempfile
sys.path.insert(0, "tests")
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
import hopper_compile as hc
sys.path.insert(0, ".ci/gpu-triton")
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton.runtime import driver
driver.set_active(hc.CompileOnlyHopperDriver())
import warnings
warnings.filterwarnings("ignore")
import torch
from autotune import registry
from autotune.verify import outputs_like
base = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1, "num_warps": 8, "num_stages": 3}
ptxas = glob.glob(".ci/gpu-triton/triton/backends/nvidia/bin/ptxas")[0]
for variant in sys.argv[1:]:
    cache = tempfile.mkdtemp(); os.environ["TRITON_CACHE_DIR"] = cache
    from triton.runtime import cache as tc
    spec = registry.get("linear")
    problem = dict(spec.interpreter_presets[0])
    inputs = spec.make_inputs(problem, torch.bfloat16, torch.device("cpu"), 0)
    spec.launch(inputs, {**base, "variant": variant}, outputs_like(spec.baseline(inputs)))
    for f in glob.glob(cache + "/*/_gemm_kernel.ptx"):
        out = subprocess.run([ptxas, "-arch=sm_90a", "-v", f, "-o", "/tmp/x.cubin"], capture_output=True, text=True).stderr
        print(variant, problem, [l.strip() for l in out.splitlines() if "spill" in l or "registers" in l])
