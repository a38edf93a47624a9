"""Host time per call of a model that `autotune.patch` patched, against the same model unpatched: what the patched
modules' routing costs the CPU. The models are the end-to-end benchmarks' (e2e_unet_block.py's U-Net block forward
under no_grad, e2e_decoder_layer.py's decoder layer forward + backward, from torch modules and, where installed,
from diffusers' and transformers' modules) at tiny sizes, so
the host, not the device, sets the pace; no stored row is for such shapes, so nothing is routed (the report says
how many call shapes were), and what the patched model costs over the unpatched one is the routing's host cost.

    python benchmarks/patch_host_cost.py                     # this tree: a table on stdout
    python benchmarks/patch_host_cost.py --compile           # also torch.compile of each (inductor)
    python benchmarks/patch_host_cost.py --tree before=/path/to/old --tree after=. --out benchmarks/results/NAME

Timing: each repeat runs `--calls` calls of every variant in turn (one synchronize per repeat on a GPU), so load
on the machine hits them alike; the report gives each variant's minimum and median of the per-call means, and the
patched model's extra time from the minima (the least disturbed repeats). On a CPU it runs in one thread. With
--tree LABEL=PATH (once or more), each round runs this script once per tree in a subprocess that imports that
tree's `autotune`, trees alternating.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import e2e_decoder_layer
import e2e_unet_block
import torch
from norm_host_path import cpu_name
from tabulate import tabulate

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
from autotune import gpu
from autotune.nn import routing
from autotune.spec import dtype_from_name


def unet_block(device, dtype, impl="torch"):
    """(model, step) of a tiny U-Net block's forward under no_grad."""
    cls = e2e_unet_block.DiffusersBlock if impl == "diffusers" else e2e_unet_block.TorchBlock
    block = cls(16, 32, 2, 8, 24, 4).to(device=device, dtype=dtype).eval()
    x, temb, context = (
        torch.randn(*shape, device=device, dtype=dtype) for shape in ((1, 16, 4, 4), (1, 32), (1, 5, 24))
    )

    def step(model):
        with torch.no_grad():
            return model(x, temb, context)

    return block, step


def decoder_layer(device, dtype, impl="torch"):
    """(model, step) of a tiny Llama-style decoder layer's forward + backward."""
    sizes = argparse.Namespace(impl=impl, hidden=32, heads=4, kv_heads=2, intermediate=64, seq=8, batch=1)
    layer, kwargs, _ = e2e_decoder_layer.build(sizes, device, dtype)
    x = torch.randn(1, 8, 32, device=device, dtype=dtype, requires_grad=True)

    def step(model):
        out = model(x, **kwargs)
        (out[0] if isinstance(out, tuple) else out).sum().backward()

    return layer, step


MODELS = {
    "unet-block forward": unet_block,
    "decoder-layer forward+backward": decoder_layer,
    "unet-block (diffusers) forward": functools.partial(unet_block, impl="diffusers"),
    "decoder-layer (transformers) forward+backward": functools.partial(decoder_layer, impl="transformers"),
}
"""The models; those of diffusers and transformers where the packages are installed."""
REQUIRES = {
    "unet-block (diffusers) forward": "diffusers",
    "decoder-layer (transformers) forward+backward": "transformers",
}


def measure(calls: int, repeats: int, dtype: torch.dtype, compile_backend: str | None) -> dict:
    """{model: {"patched modules", "routed shapes", "samples_us": {variant: [per-call us of each repeat]}}}."""
    device = gpu.device()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cpu":
        torch.set_num_threads(1)  # tiny tensors: threads would only add noise
    out = {}
    for name, build in MODELS.items():
        if name in REQUIRES and importlib.util.find_spec(REQUIRES[name]) is None:
            continue
        torch.manual_seed(0)
        model, step = build(device, dtype)
        patched = copy.deepcopy(model)
        report = autotune.patch(patched)
        variants = {"unpatched": model, "patched": patched}
        if compile_backend:
            variants["compile"] = torch.compile(model, backend=compile_backend)
            variants["patched compile"] = torch.compile(patched, backend=compile_backend)
        samples = {variant: [] for variant in variants}
        for m in variants.values():
            for _ in range(20):  # compiles, decides each call shape
                step(m)
        sync()
        for _ in range(repeats):
            for variant, m in variants.items():
                start = time.perf_counter()
                for _ in range(calls):
                    step(m)
                sync()
                samples[variant].append((time.perf_counter() - start) / calls * 1e6)
        out[name] = {
            "patched modules": len(report.replaced),
            "routed shapes": sum(d.routed for d in routing.decisions()),
            "samples_us": samples,
        }
        autotune.unpatch(patched)
    return out


def compare(trees: list[tuple[str, str]], args) -> dict:
    """Rounds of one subprocess per tree, trees alternating; every repeat of every round pooled per variant."""
    results: dict[str, dict] = {}
    for _ in range(args.rounds):
        for label, path in trees:
            env = dict(
                os.environ,
                PYTHONPATH=os.pathsep.join(
                    [
                        str(pathlib.Path(path).resolve()),
                        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
                    ]
                ),
            )
            argv = [sys.executable, __file__, "--json", "--calls", str(args.calls), "--repeats", str(args.repeats)]
            argv += ["--dtype", args.dtype] if args.dtype else []
            argv += ["--compile", "--compile-backend", args.compile_backend] if args.compile else []
            run = subprocess.run(argv, env=env, capture_output=True, text=True)
            if run.returncode != 0:
                raise SystemExit(f"tree {label} ({path}) failed:\n{run.stderr[-3000:]}")
            found = json.loads(run.stdout)
            if pathlib.Path(found["autotune"]).resolve() != pathlib.Path(path).resolve() / "autotune":
                raise SystemExit(f"tree {label} imported autotune from {found['autotune']}, not from {path}")
            mine = results.setdefault(label, {})
            for model, result in found["models"].items():
                pooled = mine.setdefault(model, {**result, "samples_us": {v: [] for v in result["samples_us"]}})
                for variant, values in result["samples_us"].items():
                    pooled["samples_us"][variant].extend(values)
    return results


def table(results: dict[str, dict]) -> str:
    """Per tree and model: each variant's min and median us per call, and the patched model's extra host time
    (of the minima: the least disturbed repeats, on a shared machine) in all and per patched module."""
    rows = []
    for label, models in results.items():
        for model, result in models.items():
            samples = result["samples_us"]
            least = {variant: min(values) for variant, values in samples.items()}
            row = [label, model, result["patched modules"], result["routed shapes"]]
            row += [f"{least[v]:.1f} / {statistics.median(samples[v]):.1f}" for v in samples]
            extra = least["patched"] - least["unpatched"]
            row += [extra, extra / max(result["patched modules"], 1), least["unpatched"] / least["patched"]]
            if "compile" in samples:
                row += [least["compile"] / least["patched compile"]]
            rows.append(row)
    variants = next(iter(next(iter(results.values())).values()))["samples_us"]
    headers = ["tree", "model", "patched modules", "routed shapes"]
    headers += [f"{v} us (min / median)" for v in variants]
    headers += ["extra us (minima)", "extra us per module", "unpatched / patched"]
    headers += ["compile / patched compile"] if "compile" in variants else []
    return tabulate(rows, headers=headers, tablefmt="github", floatfmt=".3g")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--dtype", help="default fp32 under the Triton interpreter, fp16 on a GPU")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile of each model")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH", help="a source tree to time")
    parser.add_argument("--rounds", type=int, default=3, help="with --tree: subprocesses per tree")
    parser.add_argument("--out", help="write OUT.md and OUT.json")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a --tree round's subprocess
    args = parser.parse_args()
    if args.tree:
        trees = [tuple(t.split("=", 1)) for t in args.tree]
        if any(len(t) != 2 for t in trees):
            parser.error("--tree takes LABEL=PATH")
        results = compare(trees, args)
    else:
        dtype = dtype_from_name(args.dtype or ("fp32" if gpu.interpreter_active() else "fp16"))
        models = measure(args.calls, args.repeats, dtype, args.compile_backend if args.compile else None)
        if args.json:
            print(json.dumps({"autotune": str(pathlib.Path(autotune.__file__).parent), "models": models}))
            return
        results = {"this tree": models}
    text = table(results)
    print(text)
    if args.out:
        trees = f" x {args.rounds} rounds, trees alternating ({', '.join(args.tree)})" if args.tree else ""
        header = (
            f"Host time per call of a patched model against the unpatched one (nothing routed), on {cpu_name()} "
            f"({os.cpu_count()} CPUs) with {gpu.current_gpu().device_name}, torch {torch.__version__}, "
            f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}; {args.calls} calls per "
            f"repeat, {args.repeats} repeats{trees}."
        )
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(results, indent=1))
        out.with_suffix(".md").write_text(header + "\n\n" + text + "\n")


if __name__ == "__main__":
    main()
