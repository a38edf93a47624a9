"""Two sources of the layer/rms_norm backward kernel in one process: this tree's and another tree's
`autotune/kernels/layer_norm_backward.py`, launched with the same config on the same inputs, each checked
against the float64 reference by the gate's comparison, then timed (medians, L2 cleared) next to torch's
eager backward.

    python benchmarks/norm_backward_ab.py --other lnb-reload=/path/to/branch/tree --out benchmarks/results/NAME

The config is this tree's runtime choice for each problem (its shipped or user row, else nearest, else the
default), or --config JSON for all. The other source is loaded under its own module name and shares this
tree's `autotune` otherwise. Writes NAME.md and NAME.json (GPU name, versions and date) when --out is given.
"""

from __future__ import annotations

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
import argparse
import importlib.util
import json
import pathlib

from tabulate import tabulate

from autotune import gpu, runtime
from autotune.measure import bench
from autotune.measure import report
from autotune.kernels.norm import layer_norm_backward
from autotune.spec import dtype_from_name
from autotune.gate.verify import compare_outputs, outputs_like

PRESETS = ("8192x4096+res", "16384x8192+res", "8192x4096")


def load_other(path: str):
    """The other tree's layer_norm_backward module, under a name of its own."""
    file = pathlib.Path(path) / "autotune" / "kernels" / "layer_norm_backward.py"
    if not file.is_file():
        raise SystemExit(f"--other: no {file}")
    module_spec = importlib.util.spec_from_file_location("norm_backward_ab_other", file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def measure(kernel: str, shape: str, dtype_name: str, config: dict | None, sources: dict) -> dict:
    """One problem: each source's gate result and median ms, and torch eager's ms."""
    spec = autotune.get(kernel)
    rms = kernel.startswith("rms")
    dtype = dtype_from_name(dtype_name)
    problem = spec.parse_shape(shape)
    inputs = spec.make_inputs(problem, dtype, gpu.device(), 0)
    base = spec.baseline(inputs)
    ref = spec.reference(inputs)
    if config is None:
        config = runtime.tuned(spec).resolve(dtype, spec.bucket(problem), problem).config
    record = {"kernel": kernel, "shape": shape, "dtype": dtype_name, "config": config,
              "torch eager ms": bench.time_ms(lambda: spec.baseline(inputs))}
    for label, module in sources.items():
        out = outputs_like(base)
        module._launch_spec(inputs, config, out, rms)
        _, _, failure = compare_outputs(out, ref, base)
        record[f"{label} gate"] = "pass" if failure is None else failure
        record[f"{label} ms"] = bench.time_ms(lambda module=module, out=out: module._launch_spec(inputs, config, out, rms))
    first, *others = sources
    for label in others:
        record[f"{label} / {first} time"] = record[f"{label} ms"] / record[f"{first} ms"]
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, metavar="LABEL=PATH", help="the tree whose kernel source to compare")
    parser.add_argument("--kernel", action="append", choices=("layer_norm_backward", "rms_norm_backward"))
    parser.add_argument("--shape", action="append", help=f"default: {', '.join(PRESETS)}")
    parser.add_argument("--dtype", action="append", help="default: bf16")
    parser.add_argument("--config", type=json.loads, help="one config for every problem (default: the runtime's)")
    parser.add_argument("--out", help="write OUT.md and OUT.json")
    args = parser.parse_args()
    label, sep, path = args.other.partition("=")
    if not sep or not label or label == "this":
        raise SystemExit("--other: expected LABEL=PATH with a label other than 'this'")
    sources = {"this": layer_norm_backward, label: load_other(path)}
    records = [measure(k, s, d, args.config, sources)
               for k in args.kernel or ("layer_norm_backward", "rms_norm_backward")
               for s in args.shape or PRESETS for d in args.dtype or ("bf16",)]
    table = tabulate([{k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in r.items()} for r in records],
                     headers="keys", tablefmt="github", floatfmt=".4g")
    environment = report.environment()
    print(table)
    if args.out:
        pathlib.Path(args.out + ".json").write_text(json.dumps({**environment, "records": records}, indent=1))
        header = ", ".join(f"{k} {environment[k]}" for k in ("device_name", "torch", "triton", "date") if k in environment)
        pathlib.Path(args.out + ".md").write_text(f"{header}\n\n{table}\n")


if __name__ == "__main__":
    main()
