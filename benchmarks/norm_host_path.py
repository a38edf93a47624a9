"""Host time per call of the public layer_norm, rms_norm and group_norm, forward and backward
(softmax for reference), and
of the matmul family's matmul, linear, mlp and gated_mlp (its forward + backward too): what one call costs the CPU
before the GPU sees any work.

    python benchmarks/norm_host_path.py                  # this tree: one JSON object on stdout
    python benchmarks/norm_host_path.py --tree before=/path/to/old --tree after=. --out benchmarks/results/NAME

--launch stub (the default; the only choice under the Triton interpreter, whose launches say nothing about
a GPU's): the Triton kernels are replaced, in this process only, by a no-op that takes the same arguments,
so the time is the host path without the launch. --launch real (GPU): the kernels launch, with one
synchronize per repeat; shapes are small, so the host, not the GPU, sets the pace.

With --tree LABEL=PATH (once or more), each round runs this script once per tree in a subprocess that
imports that tree's `autotune` (PYTHONPATH=PATH), trees alternating, so load on the machine hits them alike;
the report gives each case's median and minimum over every repeat of every round, as a table (.md) and .json.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import warnings

import torch
from hot_path import per_call_samples_us
from tabulate import tabulate

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune import gpu

CASES = [
    # (label, kernel, shape, mode): mode "call" times the public function; "requires grad" with x requiring
    # grad (the forward records a graph); "forward+backward" a forward recording a graph, then its backward;
    # "training" the same with every float input requiring grad (a layer's parameters too).
    ("layer_norm", "layer_norm", "64x512", "call"),
    ("layer_norm +res", "layer_norm", "64x512+res", "call"),
    ("rms_norm", "rms_norm", "64x512", "call"),
    ("rms_norm +res", "rms_norm", "64x512+res", "call"),
    ("group_norm silu", "group_norm", "2x64x8x8,groups=8,activation=silu", "call"),
    ("group_norm silu channels_last", "group_norm", "2x64x8x8,groups=8,activation=silu,layout=channels_last", "call"),
    ("layer_norm +res, x requires grad", "layer_norm", "64x512+res", "requires grad"),
    ("rms_norm +res, x requires grad", "rms_norm", "64x512+res", "requires grad"),
    ("group_norm silu, x requires grad", "group_norm", "2x64x8x8,groups=8,activation=silu", "requires grad"),
    ("layer_norm backward +res", "layer_norm_backward", "64x512+res", "call"),
    ("rms_norm backward", "rms_norm_backward", "64x512", "call"),
    ("group_norm backward silu", "group_norm_backward", "2x64x8x8,groups=8,activation=silu", "call"),
    (
        "group_norm backward silu channels_last",
        "group_norm_backward",
        "2x64x8x8,groups=8,activation=silu,layout=channels_last",
        "call",
    ),
    ("layer_norm, forward+backward", "layer_norm", "64x512", "forward+backward"),
    ("group_norm silu, forward+backward", "group_norm", "2x64x8x8,groups=8,activation=silu", "forward+backward"),
    ("softmax (reference)", "softmax", "64x512", "call"),
    ("matmul", "matmul", "64x64x64", "call"),
    ("linear + bias + gelu_tanh", "linear", "64x128x64,bias,gelu_tanh", "call"),
    ("mlp (+ bias, gelu_tanh)", "mlp", "64x64x128x32,bias,gelu_tanh", "call"),
    ("gated_mlp (silu)", "gated_mlp", "64x64x128x32", "call"),
    ("gated_mlp (silu), forward+backward, every input requires grad", "gated_mlp", "64x64x128x32", "training"),
    # The same three with their GEMMs reading through tensor descriptors (what the H100's rows mostly take):
    # the config forced, in the measuring process only.
    ("matmul, tma_persistent", "matmul", "64x64x64", "call", {"matmul": "tma_persistent"}),
    (
        "linear + bias + gelu_tanh, tma_persistent",
        "linear",
        "64x128x64,bias,gelu_tanh",
        "call",
        {"linear": "tma_persistent"},
    ),
    (
        "mlp two_pass, tma_persistent linears",
        "mlp",
        "64x64x128x32,bias,gelu_tanh",
        "call",
        {"linear": "tma_persistent"},
    ),
]
"""(label, kernel, shape, mode[, {kernel: GEMM variant}]): a case's public call,
and the variant its GEMM configs take."""
FORCED_GEMM = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2, "SPLIT_K": 1}
KERNEL_MODULES = {
    "autotune.kernels.norm.layer_norm": ("_KERNELS",),
    "autotune.kernels.norm.layer_norm_backward": ("_norm_backward_kernel", "_sum_partials_kernel"),
    "autotune.kernels.fused_softmax.softmax": ("_KERNELS",),
    "autotune.kernels.gemm.gemm": ("_gemm_kernel", "_split_k_sum_kernel"),
    "autotune.kernels.gemm.mlp": ("_mlp_fused_kernel",),
    "autotune.kernels.gemm.gated": ("_gated_kernel",),
    "autotune.kernels.gemm.gated_backward": ("_gated_backward_kernel",),
    "autotune.kernels.norm.group_norm": (
        "_group_norm_single_kernel",
        "_group_norm_looped_kernel",
        "_group_norm_split_stats_kernel",
        "_group_norm_split_normalize_kernel",
    ),
    "autotune.kernels.norm.group_norm_backward": (
        "_group_norm_backward_single_kernel",
        "_group_norm_backward_sums_kernel",
        "_group_norm_backward_dx_kernel",
        "_param_grad_reduce_kernel",
    ),
}


class _NoLaunch:
    """Stands in for a @triton.jit kernel: kernel[grid](*args, **meta) does nothing."""

    def __getitem__(self, grid):
        return self._launch

    @staticmethod
    def _launch(*args, **kwargs) -> None:
        return None


def stub_launches() -> None:
    """Replace every kernel the norms (forward and backward), softmax and the matmul family launch with _NoLaunch,
    before any call."""
    for module_name, names in KERNEL_MODULES.items():
        module = importlib.import_module(module_name)
        for name in names:
            kernels = getattr(module, name)
            if isinstance(kernels, dict):
                setattr(module, name, {variant: _NoLaunch() for variant in kernels})
            else:
                setattr(module, name, _NoLaunch())


@contextlib.contextmanager
def forced_variants(variants: dict[str, str]):
    """Every call of the kernels named in `variants` takes FORCED_GEMM's tiles with that variant, whatever the
    databases hold (caches cleared before and after)."""
    from autotune import runtime

    looked_up = runtime.TunedConfigs.config

    def config(self, dtype, bucket, problem):
        variant = variants.get(self.spec.name)
        return looked_up(self, dtype, bucket, problem) if variant is None else dict(FORCED_GEMM, variant=variant)

    runtime.clear_cache()
    runtime.TunedConfigs.config = config
    try:
        yield
    finally:
        runtime.TunedConfigs.config = looked_up
        runtime.clear_cache()


def make_call(kernel: str, shape: str, mode: str, dtype: torch.dtype):
    spec = autotune.get(kernel)
    inputs = spec.make_inputs(spec.parse_shape(shape), dtype, gpu.device(), 0)
    if mode == "call":
        return lambda: spec.public(inputs)
    for name, value in inputs.items():
        if name == "x" or (mode == "training" and isinstance(value, torch.Tensor) and value.is_floating_point()):
            value.requires_grad_(True)
    if mode == "requires grad":
        return lambda: spec.public(inputs)
    dy = torch.randn_like(spec.public(inputs)).detach()  # the output's shape (a launch stubbed leaves it unwritten)

    def forward_backward():
        torch.autograd.backward(spec.public(inputs), dy)
        for value in inputs.values():
            if isinstance(value, torch.Tensor):
                value.grad = None

    return forward_backward


def selected(match: str | None) -> list[tuple]:
    """The CASES whose label `match` (a regular expression) finds (every case without one)."""
    return [case for case in CASES if match is None or re.search(match, case[0])]


def measure(launch: str, calls: int, repeats: int, dtype: torch.dtype, match: str | None = None) -> dict:
    if launch == "real" and gpu.interpreter_active():
        raise SystemExit("--launch real times GPU launches; under the Triton interpreter use --launch stub")
    if launch == "stub":
        stub_launches()
    warnings.simplefilter("ignore")  # "no tuned configs" on this machine: the default config is launched
    rows = {}
    for label, kernel, shape, mode, *variants in selected(match):
        with forced_variants(variants[0] if variants else {}):
            rows[label] = per_call_samples_us(make_call(kernel, shape, mode, dtype), calls, repeats)
    return {"autotune": str(pathlib.Path(autotune.__file__).parent), "launch": launch, "rows": rows}


def cpu_name() -> str:
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def compare(trees: list[tuple[str, str]], args) -> dict:
    """Rounds of one subprocess per tree, trees alternating; every repeat of every round pooled per case."""
    samples = {label: {case[0]: [] for case in selected(args.match)} for label, _ in trees}
    imported = {}
    for _ in range(args.rounds):
        for label, path in trees:
            # The tree first, so its autotune is the one imported; the rest of PYTHONPATH stays (on the device it
            # holds the wheels of Optuna and SQLAlchemy: without them the tree's autotune does not import).
            env = dict(
                os.environ,
                PYTHONPATH=os.pathsep.join(
                    [
                        str(pathlib.Path(path).resolve()),
                        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
                    ]
                ),
            )
            run = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--launch",
                    args.launch,
                    "--calls",
                    str(args.calls),
                    "--repeats",
                    str(args.repeats),
                    "--dtype",
                    args.dtype,
                    *(["--match", args.match] if args.match else []),
                ],
                env=env,
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                raise SystemExit(f"tree {label} ({path}) failed:\n{run.stderr[-3000:]}")
            result = json.loads(run.stdout)
            imported[label] = result["autotune"]
            for case, values in result["rows"].items():
                samples[label][case].extend(values)
    for label, path in trees:
        if pathlib.Path(imported[label]).resolve() != (pathlib.Path(path).resolve() / "autotune"):
            raise SystemExit(f"tree {label} imported autotune from {imported[label]}, not from {path}")
    info = gpu.current_gpu()
    return {
        "what": f"host time per public call, launch {args.launch}",
        "machine": f"{cpu_name()} with {info.device_name}",
        "cpus": os.cpu_count(),
        "gpu": info.name,
        "torch": torch.__version__,
        "dtype": args.dtype,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "rounds": args.rounds,
        "calls": args.calls,
        "repeats": args.repeats,
        "trees": {label: imported[label] for label, _ in trees},
        "samples_us": samples,
    }


def table(report: dict) -> str:
    labels = list(report["trees"])
    first, last = labels[0], labels[-1]
    rows = []
    for case, _, shape, *_ in CASES:
        if case not in report["samples_us"][first]:
            continue
        row = [case, shape]
        for label in labels:
            values = report["samples_us"][label][case]
            row += [statistics.median(values), min(values)]
        if len(labels) > 1:
            a, b = (statistics.median(report["samples_us"][label][case]) for label in (first, last))
            row += [a - b, a / b]
        rows.append(row)
    headers = ["call", "shape"]
    for label in labels:
        headers += [f"{label} median us", f"{label} min us"]
    if len(labels) > 1:
        headers += [f"saved us ({first} - {last}, medians)", f"{first} / {last}"]
    return tabulate(rows, headers=headers, tablefmt="github", floatfmt=".1f")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launch", choices=("stub", "real"), default="stub")
    parser.add_argument("--calls", type=int, default=2000, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="a source tree to time (repeat to compare), each imported in its own subprocess",
    )
    parser.add_argument("--rounds", type=int, default=5, help="with --tree: subprocesses per tree")
    parser.add_argument("--out", help="with --tree: write OUT.md and OUT.json")
    parser.add_argument("--note", help="with --out: a paragraph for the report (what the trees are)")
    parser.add_argument("--match", help="only the cases whose label this regular expression finds")
    args = parser.parse_args()
    if not args.tree:
        from autotune.spec import dtype_from_name

        print(json.dumps(measure(args.launch, args.calls, args.repeats, dtype_from_name(args.dtype), args.match)))
        return
    trees = [tuple(t.split("=", 1)) for t in args.tree]
    if any(len(t) != 2 for t in trees):
        parser.error("--tree takes LABEL=PATH")
    report = compare(trees, args)
    text = table(report)
    print(text)
    if args.out:
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(report, indent=1))
        launch = (
            "launch excluded: every Triton kernel replaced, in the measuring process only, by a no-op "
            "taking the same arguments"
            if args.launch == "stub"
            else "launch included: the real kernels, one synchronize per repeat"
        )
        header = (
            f"Host time per call of the public functions ({launch}), {args.dtype}, on {report['machine']} "
            f"({report['cpus']} CPUs), torch {report['torch']}, {report['date']}.\n"
            f"Mean time per call in each repeat of {args.calls} calls; median and minimum over "
            f"{args.rounds} rounds x {args.repeats} repeats, trees alternating round by round "
            f"({', '.join(f'{label}: {path}' for label, path in trees)}).\n\n"
            + (args.note + "\n\n" if args.note else "")
        )
        out.with_suffix(".md").write_text(header + text + "\n")


if __name__ == "__main__":
    main()
