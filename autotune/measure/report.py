"""Same-run comparison: a kernel's tuned config (what the runtime launches) against its default config,
PyTorch eager, torch.compile, a vendor library call, Liger-Kernel, torch's sdpa backends (attention) and a device
copy of the same bytes, in one process, on the same random inputs, forward alone or forward + backward through
autograd; medians, rates and the share of the GPU's roofline peak; one record per measurement, a table, and
files."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from tabulate import tabulate

from autotune import gpu, runtime
from autotune.gate.compare import fresh_outputs
from autotune.measure import attention_peers, bench, peers
from autotune.measure.against import AGAINST, parse_against  # noqa: F401  (the report's names for them)
from autotune.measure.bench import require_nonzero, time_balanced
from autotune.measure.environment import environment
from autotune.runtime import registry
from autotune.space import Problem
from autotune.spec import DTYPE_NAMES, Cost, KernelSpec, shape_label

IMPLEMENTATIONS = ("tuned", "tuned-launch", *AGAINST)
"""What can be timed: the public function as users call it (it launches the runtime's config: exact bucket,
nearest, else default; the tuned config launched directly where a kernel has none), the tuned config launched
directly, the default config, the baseline in PyTorch eager, the baseline under torch.compile, the
vendor library call (kernels that have one), Liger-Kernel's op (softmax, layer_norm, rms_norm, gated_mlp; where
installed), a device copy of the bytes the kernel must move (its cost's) and torch's sdpa with each backend
(flash_attn)."""
FORWARD_ONLY = ("tuned-launch", "default", "vendor")
"""Implementations that launch one kernel's config directly: not timed with `backward` (forward + backward)."""
FORWARD_AND_BACKWARD = "forward+backward"
UNITS = {"memory": "GB/s", "compute": "TFLOP/s"}


@dataclass(frozen=True)
class Case:
    """One kernel on one problem (as `problem_for` makes it for the dtype) in one dtype."""

    spec: KernelSpec
    problem: Problem
    dtype: torch.dtype


@dataclass(frozen=True)
class Plan:
    """The cases to measure, and the (kernel, dtype) pairs left out because the kernel cannot run the dtype here."""

    cases: list[Case]
    skipped: list[str] = field(default_factory=list)


def shapes_by_kernel(items: Sequence[str], kernels: Sequence[str]) -> dict[str, list[str]]:
    """`--shape` values by kernel: 'KERNEL=SPEC', or a bare SPEC where only one kernel is measured."""
    shapes: dict[str, list[str]] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        if sep and name in kernels:
            shapes.setdefault(name, []).append(spec)
        elif sep and name in registry.names():
            raise ValueError(f"--shape {item!r}: kernel {name!r} is not among those measured ({', '.join(kernels)})")
        elif len(kernels) == 1:
            shapes.setdefault(kernels[0], []).append(item)
        else:
            raise ValueError(f"--shape {item!r}: with several kernels, say whose shape it is: KERNEL=SPEC")
    return shapes


def default_dtypes(spec: KernelSpec) -> tuple[torch.dtype, ...]:
    """Every dtype the kernel supports on a GPU; float32 alone under the interpreter (slow, and no bf16 dots)."""
    if gpu.interpreter_active() and torch.float32 in spec.dtypes:
        return (torch.float32,)
    return tuple(spec.dtypes)


def backward_spec(name: str) -> KernelSpec:
    """The backward kernel of forward kernel `name` (`NAME_backward`), whose cost a forward + backward step adds;
    ValueError naming the kernels that have one where `name` has none."""
    if f"{name}_backward" not in registry.names():
        having = [n for n in registry.names() if f"{n}_backward" in registry.names()]
        raise ValueError(f"--backward: {name} has no backward kernel to time; expected one of {', '.join(having)}")
    return registry.get(f"{name}_backward")


def case_cost(case: Case, backward: bool = False) -> Cost:
    """FLOPs and the fewest bytes of a case: its kernel's, plus its backward kernel's for a forward + backward step."""
    cost = case.spec.cost(case.problem, case.dtype)
    if not backward:
        return cost
    back = backward_spec(case.spec.name).cost(case.problem, case.dtype)
    return Cost(flops=cost.flops + back.flops, bytes=cost.bytes + back.bytes)


def plan(
    kernels: Sequence[str],
    dtypes: Sequence[torch.dtype] = (),
    shapes: Mapping[str, Sequence[str]] | None = None,
    *,
    skip_unsupported: bool = False,
) -> Plan:
    """The cases of each kernel in each dtype (default: `default_dtypes`) on its `shapes` (default: its presets
    here, small ones under the interpreter). ValueError for a shape that does not parse or that the default
    config cannot run, and for a dtype a kernel does not support unless `skip_unsupported`."""
    cases, skipped = [], []
    for name in kernels:
        spec = registry.get(name)
        texts = (shapes or {}).get(name, [])
        try:
            problems = [spec.parse_shape(text) for text in texts] or list(spec.presets_here())
        except ValueError as exc:
            raise ValueError(f"--shape for {name}: {exc}") from None
        for dtype in dtypes or default_dtypes(spec):
            if dtype not in spec.dtypes:
                if not skip_unsupported:
                    raise ValueError(
                        f"--dtype {DTYPE_NAMES[dtype]}: {name} supports {[DTYPE_NAMES[d] for d in spec.dtypes]} here"
                    )
                skipped.append(f"{name} {DTYPE_NAMES[dtype]}: not supported here")
                continue
            for problem in problems:
                problem = spec.problem_for(problem, dtype)
                reason = spec.space.rejects(spec.space.default, problem)
                if reason:
                    raise ValueError(f"{name}: the default config cannot run {shape_label(problem)}: {reason}")
                cases.append(Case(spec, problem, dtype))
    if not cases:
        raise ValueError(f"nothing to measure: {'; '.join(skipped) or 'no kernels named'}")
    return Plan(cases, skipped)


def measure(
    plan: Plan,
    impls: Sequence[str],
    *,
    graphs: bool = False,
    backward: bool = False,
    on_case: Callable[[int, Case], None] | None = None,
    on_measured: Callable[[dict], None] | None = None,
) -> dict:
    """Time each implementation in `impls` (see IMPLEMENTATIONS) on each case of the plan; with `graphs`, also
    replayed from a CUDA graph; with `backward`, each as a training step: forward and backward through autograd,
    the gradients of every input tensor (weight, bias and residual included) computed (the tuned kernel and its
    backward kernel at the runtime's configs; FORWARD_ONLY implementations are left out). The report:
    `environment()`, what was skipped and why (a peer with nothing to run for a case, e.g. Liger-Kernel not
    installed), and one record per case and implementation (an implementation that raises is recorded with its
    error, not timed; an sdpa backend that refuses the case, as unsupported with torch's reason). `on_measured`
    gets the report so far after each case but the last, marked "partial" (to save what a cut-short run
    measured)."""
    unknown = [i for i in impls if i not in IMPLEMENTATIONS]
    if unknown:
        raise ValueError(f"implementations {unknown}: expected some of {IMPLEMENTATIONS}")
    report = {**environment(), "pass": FORWARD_AND_BACKWARD if backward else "forward"}
    skipped = list(plan.skipped)
    if backward:
        for case in plan.cases:
            backward_spec(case.spec.name)
        skipped += [
            f"{impl}: not timed forward + backward (it launches one kernel's config directly)"
            for impl in impls
            if impl in FORWARD_ONLY
        ]
        impls = [impl for impl in impls if impl not in FORWARD_ONLY]
    records: list[dict] = []
    compiled: dict[str, Callable] = {}
    # One static-shape graph per problem is torch.compile at its best; lift dynamo's limit of 8 recompiles,
    # past which it would silently run eager.
    with torch._dynamo.config.patch(recompile_limit=1024):
        for i, case in enumerate(plan.cases):
            if on_case:
                on_case(i, case)
            if "compile" in impls and case.spec.name not in compiled:
                compiled[case.spec.name] = torch.compile(
                    peers.torch_function(case.spec) if backward else case.spec.baseline, dynamic=False
                )
            records += _measure_case(case, impls, compiled.get(case.spec.name), graphs, backward, skipped)
            if on_measured and i + 1 < len(plan.cases):
                on_measured(
                    {
                        **report,
                        "partial": f"{i + 1} of {len(plan.cases)} cases measured",
                        "skipped": list(dict.fromkeys(skipped)),
                        "records": list(records),
                    }
                )
    return {**report, "skipped": list(dict.fromkeys(skipped)), "records": records}


def _calls(
    case: Case,
    inputs: dict,
    impls: Sequence[str],
    choice: runtime.Choice,
    compiled: Callable | None,
    backward: bool,
    cost: Cost,
    skipped: list[str],
    unsupported: dict[str, str],
) -> dict[str, Callable[[], object]]:
    """What each implementation runs on the case's inputs: one call, or with `backward` one training step; a
    peer with nothing to run here is left out, and why goes into `skipped` (or, for an sdpa backend that refuses
    the case, into `unsupported`)."""
    spec = case.spec
    if backward:
        fns = {
            "tuned": spec.public,
            "torch": peers.torch_function(spec),
            "compile": compiled,
        }  # public: autograd's path
    else:
        out = fresh_outputs(spec, inputs, spec.baseline(inputs), None)
        default = dict(spec.space.default)
        fns = {
            "tuned": spec.public or (lambda i: spec.launch(i, choice.config, out)),
            "tuned-launch": lambda i: spec.launch(i, choice.config, out),
            "default": lambda i: spec.launch(i, default, out),
            "torch": spec.baseline,
            "compile": compiled,
            "vendor": spec.vendor,
        }
    calls = {}
    for impl in impls:
        if impl == "copy":
            calls[impl] = peers.copy_call(cost.bytes, gpu.device())
            continue
        if impl in attention_peers.PEERS:
            try:
                if spec.name in attention_peers.KERNELS:  # other kernels: no column, as without a vendor call
                    calls[impl] = attention_peers.sdpa_call(impl, inputs, backward)
            except peers.PeerUnavailable as exc:
                unsupported[impl] = str(exc)
            continue
        fn = fns.get(impl)
        if impl == "liger":
            try:
                fn = peers.liger_function(spec.name, inputs)
            except peers.PeerUnavailable as exc:
                skipped.append(
                    f"liger: {exc}"
                    if str(exc) == peers.LIGER_MISSING
                    else f"{spec.name} {DTYPE_NAMES[case.dtype]} {shape_label(case.problem)} liger: {exc}"
                )
                continue
        if fn is None:  # a kernel without a vendor call
            continue
        calls[impl] = peers.training_step(fn, inputs) if backward else (lambda fn=fn: fn(inputs))
    return calls


def _measure_case(
    case: Case,
    impls: Sequence[str],
    compiled: Callable | None,
    graphs: bool,
    backward: bool = False,
    skipped: list[str] | None = None,
) -> list[dict]:
    spec, problem, dtype = case.spec, case.problem, case.dtype
    inputs = spec.make_inputs(problem, dtype, gpu.device(), 0)
    require_nonzero(spec, inputs)
    bucket = spec.bucket(problem)
    choice = runtime.tuned(spec).resolve(dtype, bucket, problem)
    default = dict(spec.space.default)
    cost = case_cost(case, backward)
    unsupported: dict[str, str] = {}
    calls = _calls(
        case, inputs, impls, choice, compiled, backward, cost, [] if skipped is None else skipped, unsupported
    )
    bound = attention_peers.rate_bound(spec.name, problem, spec.bound)
    records = []
    for impl in impls:
        if impl not in calls and impl not in unsupported:
            continue
        records.append(
            {
                "kernel": spec.name,
                "problem": problem,
                "shape": shape_label(problem),
                "bucket": bucket,
                "bound": bound,
                "dtype": DTYPE_NAMES[dtype],
                "impl": impl,
                "flops": cost.flops,
                "bytes": cost.bytes,
                "config": default if impl == "default" else choice.config if impl.startswith("tuned") else None,
                "config_source": choice.source if impl.startswith("tuned") else None,
                "tuned_for": choice.bucket if impl.startswith("tuned") else None,
                **({"pass": FORWARD_AND_BACKWARD} if backward else {}),
            }
        )
    timings = time_balanced({r["impl"]: calls[r["impl"]] for r in records if r["impl"] in calls}, graphs)
    for record in records:
        if record["impl"] in unsupported:
            record.update(median_ms=None, graph_ms=None, unsupported=unsupported[record["impl"]])
            continue
        timing = timings[record["impl"]]
        if isinstance(timing, Exception):  # one implementation that cannot run this case does not end the report
            record.update(median_ms=None, graph_ms=None, error=f"{type(timing).__name__}: {str(timing).strip()[:300]}")
            continue
        ms, graphed = timing
        rate = bench.rate(cost, ms, bound=bound, dtype_name=DTYPE_NAMES[dtype])
        record.update(median_ms=ms, graph_ms=graphed, gbs=rate.gbs, tflops=rate.tflops, pct_peak=rate.pct_peak)
    return records


def rows(report: dict) -> list[dict]:
    """One row per kernel, dtype and problem: each implementation's ms (and CUDA-graph ms where measured), rate
    and % of the GPU's peak, and the tuned kernel's speedup over each other one (their time / its time: above 1,
    tuned is faster)."""
    table: dict[tuple, dict] = {}
    for r in report["records"]:
        # The bucket tells apart problems of one shape (a residual or not, a layout).
        key = (r["kernel"], r.get("pass"), r["dtype"], r["shape"], r["bucket"])
        row = table.setdefault(
            key,
            {
                "kernel": r["kernel"],
                **({"pass": r["pass"]} if r.get("pass") else {}),
                "dtype": r["dtype"],
                "shape": r["shape"],
                "bucket": r["bucket"],
                "config from": None,
                "unit": UNITS[r["bound"]],
            },
        )
        if r["impl"] == "tuned":
            row["config from"] = r["config_source"] + (
                f" ({r['tuned_for']})" if r["config_source"] == "nearest" else ""
            )
        ms = r["median_ms"]
        row[f"{r['impl']} ms"] = "unsupported" if r.get("unsupported") else ms
        if r.get("graph_ms") is not None:
            row[f"{r['impl']} graph ms"] = r["graph_ms"]
        rate = None if ms is None else r["gbs"] if r["bound"] == "memory" else r["tflops"]
        row[f"{r['impl']} rate"] = rate
        row[f"{r['impl']} % peak"] = r.get("pct_peak")
    for row in table.values():
        for timing in ("ms", "graph ms"):
            tuned = row.get(f"tuned {timing}")
            for impl in AGAINST:
                if f"{impl} {timing}" in row:
                    theirs = row[f"{impl} {timing}"]
                    row[f"vs {impl}" + (" (graph)" if timing == "graph ms" else "")] = (
                        theirs / tuned if isinstance(theirs, float) and theirs and tuned else None
                    )
    return list(table.values())


def header(report: dict) -> str:
    """Where and how a report was measured, in a few lines."""
    lines = [
        f"GPU: {report['gpu']} ({report['device_name']}); torch {report['torch']}; triton {report['triton']}; "
        f"date {report['date']}",
        f"timings: {report['timing']}",
    ]
    if report["interpreter"]:
        lines.append("no roofline peak under the interpreter: rates are of interpreter wall-clock times")
    else:
        peaks = ", ".join(f"{d} {t:g}" for d, t in report["peak_tflops"].items())
        lines.append(
            f"% peak: of the datasheet peak, {report['peak_bandwidth_gbs'] or 'unknown'} GB/s for memory-bound "
            f"kernels, TFLOP/s by dtype ({peaks or 'unknown'}) for compute-bound ones"
        )
    lines.append(
        "vs X: X's time / tuned time (above 1: tuned is faster); tuned: the public function, launching the "
        "config the runtime picks (config from: exact bucket, nearest, or default)"
    )
    if report.get("pass") == FORWARD_AND_BACKWARD:
        lines.append(
            "forward+backward: each timing is one training step, forward and backward through autograd, the "
            "gradients of every input (weight, bias and residual included) computed; bytes and rates are the "
            "forward's and its backward kernel's together"
        )
    if any(r["impl"] == "copy" for r in report["records"]):
        lines.append(
            "copy: a device copy of the bytes the kernel must move (half read, half written); vs copy: the "
            "tuned kernel's share of the rate the memory allows"
        )
    if any(r["impl"] in attention_peers.PEERS for r in report["records"]):
        lines.append(f"{attention_peers.NOTE}; cuDNN {report.get('cudnn') or 'none'}")
    if any(r.get("graph_ms") is not None for r in report["records"]):
        lines.append(
            "graph ms, vs X (graph): each call replayed from a CUDA graph, the L2 still cleared before each: "
            "the GPU's time without the host's, which the plain medians include wherever a call's host path "
            "outlasts the clearing"
        )
    return "\n".join(lines)


def text(report: dict) -> str:
    """The report for people: its header, a table of `rows`, and what was skipped or failed."""
    return header(report) + "\n\n" + tabulated(rows(report)) + notes(report)


def tabulated(table: list[dict]) -> str:
    """Rows as a GitHub table, without the columns empty in every row (% peak under the interpreter)."""
    keys = dict.fromkeys(k for row in table for k in row)
    empty = [k for k in keys if all(row.get(k) is None for row in table)]
    # tabulate prints a column holding text ("unsupported") as text: its numbers get the format here.
    texts = {k for k in keys if any(isinstance(row.get(k), str) for row in table)}
    table = [
        {k: f"{v:.4g}" if k in texts and isinstance(v, float) else v for k, v in row.items() if k not in empty}
        for row in table
    ]
    return tabulate(table, headers="keys", floatfmt=".4g", tablefmt="github", missingval="") + "\n"


def notes(report: dict) -> str:
    """What the report left out: cases not measured (yet), kernels skipped in a dtype, sdpa backends that refused a
    case, implementations that raised."""
    lines = (
        [f"- partial: {report['partial']} (the rest not measured: the run was cut short, or is still going)"]
        if report.get("partial")
        else []
    )
    lines += [f"- skipped {s}" for s in report.get("skipped", [])]
    lines += [
        f"- {r['kernel']} {r['dtype']} {r['shape']} {r['impl']} unsupported: {r['unsupported']}"
        for r in report["records"]
        if r.get("unsupported")
    ]
    lines += [f"- {r['kernel']} {r['dtype']} {r['shape']} {r['impl']}: {r['error']}" for r in errors(report)]
    return "\nNotes:\n" + "\n".join(lines) + "\n" if lines else ""


def errors(report: dict) -> list[dict]:
    """The records of implementations that raised instead of being timed."""
    return [r for r in report["records"] if r.get("error")]


def save(prefix: str | pathlib.Path, report: dict, text: str) -> pathlib.Path:
    """The report as PREFIX.json and its text as PREFIX.md; returns the .json path."""
    out = pathlib.Path(prefix)
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.with_name(out.name + ".json")
    path.write_text(json.dumps(report, indent=1, default=str))
    out.with_name(out.name + ".md").write_text(text)
    return path
