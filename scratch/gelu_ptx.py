import glob, os, re, sys, tempfile, collections
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
base = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1, "num_warps": 8, "num_stages": 3, "variant": sys.argv[1]}
spec = registry.get("linear")
problem = dict(spec.interpreter_presets[0], m=512, k=512, n=512, activation=sys.argv[2])
inputs = spec.make_inputs(problem, torch.bfloat16, torch.device("cpu"), 0)
spec.launch(inputs, base, outputs_like(spec.baseline(inputs)))
for f in glob.glob(cache + "/*/_gemm_kernel.ptx"):
    ops = collections.Counter(m.group(1) for m in re.finditer(r"^\s*(?:@%p\d+\s+)?([a-z]+(?:\.[a-z0-9]+)*)", open(f).read(), re.M))
    print({k: v for k, v in ops.items() if re.search(r"(ex2|rcp|div|tanh|fma|f32|st\.global|lg2|neg)", k)}); print(len(re.findall("ex2", open(f).read())))
