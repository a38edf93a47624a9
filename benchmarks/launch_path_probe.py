"""Where the host time of a small layer_norm call goes, by launch path (GPU): the public function, the JITFunction
launch it makes, the CompiledKernel's own runner, and CompiledKernel.run with the stream fixed; torch's eager
layer_norm beside them. Host time per call: `hot_path.per_call_us`, the median of 7 runs of 2000 calls, the GPU
synchronized once at the end of each; each path's output is checked against torch's. The last two reach into Triton
3.6's CompiledKernel (`run`'s arguments change between Triton versions): a measurement of what a launch that skips
Triton's binder could save, not a way to launch.

    python benchmarks/launch_path_probe.py > results/launch-path-GPU-DATE.txt
"""
import importlib

import torch
import triton

from autotune.kernels import layer_norm as public_layer_norm
from hot_path import per_call_us

ln = importlib.import_module("autotune.kernels.norm.layer_norm")


def main():
    print("torch", torch.__version__, "triton", triton.__version__)
    for rows, n in ((4, 4096), (1, 8192)):
        x = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        stats = torch.empty(3 * rows, device="cuda", dtype=torch.float32)
        config = {"variant": "single", "BLOCK_N": triton.next_power_of_2(n), "ROWS_PER_PROGRAM": 1, "num_warps": 8,
                  "num_stages": 1}
        kernel, meta = ln._launcher(config, False, False, True, True, rows)
        args = (x, x, w, b, y, y, stats, stats, rows, n, n, 0, n, 0, 1e-5)
        ck = kernel(*args, **meta)
        jit = ln._KERNELS["single"]
        constexprs = [meta[p.name] for p in jit.params if p.is_constexpr]
        full = (*args, *constexprs)
        grid = (rows, 1, 1)
        runner = ck[grid]
        device = torch.cuda.current_device()
        stream = triton.runtime.driver.active.get_current_stream(device)
        ck._init_handles()

        def raw():
            ck.run(rows, 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, *full)

        ref = torch.nn.functional.layer_norm(x, (n,), w, b)
        for name, fn in (("public autotune layer_norm", lambda: public_layer_norm(x, (n,), w, b)),
                         ("JITFunction launch", lambda: kernel(*args, **meta)),
                         ("CompiledKernel[grid] runner", lambda: runner(*full)),
                         ("CompiledKernel.run, stream fixed", raw),
                         ("torch.nn.functional.layer_norm", lambda: torch.nn.functional.layer_norm(x, (n,), w, b))):
            y.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            same = "" if name.startswith(("public", "torch")) else f" (y matches torch: {torch.allclose(y.float(), ref.float(), atol=0.05)})"
            print(f"{rows}x{n} {name}: {per_call_us(fn, 2000, 7):.1f} us{same}", flush=True)


if __name__ == "__main__":
    main()
