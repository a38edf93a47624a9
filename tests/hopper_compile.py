"""Compiles every shipped kernel's default config for Hopper (sm_90) with a given Triton, without a GPU.

The Triton in TRITON_DIR (not this environment's) compiles for real, to PTX and then a cubin by its bundled
ptxas; a stand-in driver skips only the launch. test_compiles_for_the_gpu_triton.py runs it with the GPU
machine's Triton.

    python tests/hopper_compile.py TRITON_DIR    # TRITON_DIR: `pip install --no-deps --target TRITON_DIR triton==X`

Prints JSON lines: first {"triton": version, "path": where it was imported from}, then one line per
(kernel, dtype, config): {"kernel", "dtype", "config", "ok", "seconds"} and, where it did not compile, "error".
"config" is "default", or the name of one of DESCRIPTOR_CONFIGS: the GEMM variants that read through host
tensor descriptors (autotune builds those itself, so Triton's handling of them is checked too), or of
VARIANT_CONFIGS: variants the defaults do not compile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget

H100_PROPERTIES = {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}
"""The H100's, as Triton's CUDA driver reports them. Loading a kernel, Triton refuses one whose shared memory
is over max_shared_mem (227 KiB, what one H100 program may opt into)."""
MAX_THREADS_PER_BLOCK = 1024
DESCRIPTOR_CONFIGS = {
    "tma": (
        "matmul",
        {
            "variant": "tma",
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "BLOCK_K": 32,
            "GROUP_M": 1,
            "SPLIT_K": 2,
            "num_warps": 4,
            "num_stages": 2,
        },
    ),
    "tma_persistent": (
        "linear",
        {
            "variant": "tma_persistent",
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "BLOCK_K": 32,
            "GROUP_M": 4,
            "SPLIT_K": 1,
            "num_warps": 4,
            "num_stages": 2,
        },
    ),
}
"""Configs launched besides the defaults, by name: (kernel, config)."""
VARIANT_CONFIGS = {
    "single": (
        "softmax_backward",
        {"variant": "single", "BLOCK_SIZE": 512, "ROWS_PER_PROGRAM": 2, "num_warps": 4, "num_stages": 1},
    ),
    "split": ("group_norm", {"variant": "split", "BLOCK": 16, "SPLIT": 2, "num_warps": 1, "num_stages": 1}),
    "cached": ("group_norm", {"variant": "cached", "BLOCK": 16, "SPLIT": 1, "num_warps": 1, "num_stages": 2}),
    "onepass": ("group_norm", {"variant": "onepass", "BLOCK": 64, "SPLIT": 1, "num_warps": 1, "num_stages": 1}),
    # A channel stride of 1 reaches the kernel as a constexpr (Triton specializes 1): what failed on the H100.
    "onepass_channels_last": (
        "group_norm",
        {"variant": "onepass", "BLOCK": 64, "SPLIT": 1, "num_warps": 1, "num_stages": 1},
        "2x8x5x5,groups=4,activation=silu,layout=channels_last",
    ),
    "tiles": (
        "layer_norm_backward",
        {
            "variant": "partials",
            "BLOCK_N": 512,
            "READS": 1,
            "PROGRAMS_PER_SM": 2,
            "num_warps": 4,
            "num_stages": 2,
            "kernel": "tiles",
            "BLOCK_M": 4,
        },
    ),
    "tiles_read_twice": (
        "rms_norm_backward",
        {
            "variant": "atomic",
            "BLOCK_N": 128,
            "READS": 2,
            "PROGRAMS_PER_SM": 2,
            "num_warps": 4,
            "num_stages": 2,
            "kernel": "tiles",
            "BLOCK_M": 1,
        },
    ),
    "last_split": (  # the key splits merged by the program that finishes last: an acquire-release counter
        "flash_attn",
        {
            "BLOCK_M": 16,
            "BLOCK_N": 64,
            "num_warps": 4,
            "num_stages": 3,
            "mask": "edges",
            "kv_load": "pointer",
            "KV_SPLITS": 4,
            "gqa": "packed",
            "p": "rounded",
            "engine": "triton",
            "combine": "last_split",
        },
        "1x4/2x1:300x32",
    ),
    "dv_split": (  # the backward's dV pass, P split into two half operands (GQA, causal)
        "flash_attn_backward",
        {
            "BLOCK_M": 32,
            "BLOCK_N": 32,
            "num_warps": 4,
            "num_stages": 2,
            "dq": "separate",
            "delta": "recomputed",
            "ds": "split",
            "dv": "split",
            "engine": "triton",
            "NUM_CONSUMERS": 1,
            "CONSUMER_REGISTERS": 232,
            "EARLY_DP": False,
            "PINGPONG": False,
        },
        "1x4/2x100:300x64+causal",
    ),
    "gated_tma_persistent": (
        "gated_mlp",
        {
            "variant": "tma_persistent",
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "BLOCK_K": 32,
            "GROUP_M": 4,
            "num_warps": 4,
            "num_stages": 2,
        },
    ),
}
"""Variants other than a kernel's default that its default config does not compile, by name: (kernel, config), or
(kernel, config, shape) where the kernel's first interpreter preset does not show what is compiled."""
NOT_LOADED = "not loaded"  # stands for the CUmodule and CUfunction a real driver would hand back
ERROR_CHARS = 4000


class _H100Utils:
    def get_device_properties(self, device: int) -> dict[str, int]:
        return H100_PROPERTIES

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple[str, str, int, int, int]:
        """(module, function, registers, spills, max threads a block): nothing is loaded."""
        return NOT_LOADED, NOT_LOADED, 0, 0, MAX_THREADS_PER_BLOCK


class CompileOnlyHopperDriver:
    """Triton's active driver for an sm_90 GPU that is not here: a launch compiles the kernel for real, checks
    its shared memory and threads against the H100's, and then runs nothing. Duck-types the parts of
    Triton 3.6's DriverBase that JITFunction.run and CompiledKernel._init_handles call."""

    utils = _H100Utils()

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def launcher_cls(self, src: object, metadata: object) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def describe(error: BaseException) -> str:
    """The root cause with the line that raised it, then each exception wrapping it, innermost first (for a
    CompilationError: the kernel source line), cut to ERROR_CHARS."""
    chain = [error]
    while (cause := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 20:
        chain.append(cause)
    root, *wrappers = reversed(chain)
    parts = ["".join(traceback.format_exception(root, limit=-1, chain=False))]
    parts += ["".join(traceback.format_exception_only(e)) for e in wrappers]
    return "\n".join(parts)[:ERROR_CHARS]


def compile_defaults() -> None:
    """Launches (so compiles) each shipped kernel's default config, and DESCRIPTOR_CONFIGS, on the kernel's first
    interpreter preset, a small problem, in each dtype the kernel takes on a GPU; prints one JSON line each."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "no GPU found and Triton was imported before autotune")  # wanted here
        from autotune import runtime
        from autotune.gate.compare import fresh_outputs
        from autotune.runtime import registry
    # mlp's default variant calls linear at linear's tuned configs, of which there are none for this "GPU":
    # linear's default config then, said once in a warning.
    warnings.simplefilter("ignore", runtime.NoTunedConfigsWarning)
    launches = [(name, "default", None, None) for name in registry.shipped()]
    for label, (name, config, *shape) in {**DESCRIPTOR_CONFIGS, **VARIANT_CONFIGS}.items():
        launches.append((name, label, config, shape[0] if shape else None))
    for name, label, config, shape in launches:
        spec = registry.get(name)
        problem = spec.parse_shape(shape) if shape else (spec.interpreter_presets or spec.presets)[0]
        for dtype in spec.dtypes:
            start = time.perf_counter()
            result: dict[str, object] = {"kernel": name, "dtype": str(dtype).removeprefix("torch."), "config": label}
            try:
                inputs = spec.make_inputs(problem, dtype, torch.device("cpu"), 0)
                out = fresh_outputs(spec, inputs, spec.baseline(inputs))
                spec.launch(inputs, dict(config or spec.space.default), out)
                result["ok"] = True
            except Exception as e:
                result.update(ok=False, error=describe(e))
            result["seconds"] = round(time.perf_counter() - start, 2)
            print(json.dumps(result), flush=True)


def compile_with_given_triton(description: str, compile_all) -> None:
    """The command line of a compile script: import the Triton of its TRITON_DIR argument, make the stand-in Hopper
    driver active, print which Triton it is (a JSON line), then run compile_all."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("triton_dir", help="a directory holding the Triton package to compile with")
    triton_dir = parser.parse_args().triton_dir
    sys.path.insert(0, triton_dir)
    os.environ.pop("TRITON_INTERPRET", None)  # under the interpreter nothing would be compiled
    import triton
    from triton.runtime import driver

    driver.set_active(CompileOnlyHopperDriver())
    print(json.dumps({"triton": triton.__version__, "path": os.path.dirname(triton.__file__)}), flush=True)
    compile_all()


def main() -> None:
    compile_with_given_triton(__doc__.splitlines()[0], compile_defaults)


if __name__ == "__main__":
    main()
