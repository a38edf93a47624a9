"""The kernel contract: everything autotune needs to verify, search and ship one kernel."""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from autotune.space import Config, Problem, SearchSpace

Inputs = dict[str, Any]
"""A problem made concrete: tensors plus options, as `launch`, `reference` and `baseline` take them."""

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}


def dtype_from_name(name: str) -> torch.dtype:
    """'bf16' / 'bfloat16' / 'torch.bfloat16' -> torch.bfloat16."""
    key = name.strip().lower().removeprefix("torch.")
    aliases = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
    key = aliases.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"dtype {name!r} is not one of {sorted(DTYPES)}")
    return DTYPES[key]


@dataclass(frozen=True)
class Cost:
    """Work one call does: floating-point operations and the fewest bytes it must move."""

    flops: float
    bytes: float


@dataclass(frozen=True, eq=False)
class KernelSpec:
    """One kernel, shipped or user-written, described for verify, search and the runtime.

    Args:
        launch: runs the Triton kernel(s) with one config, writing into `out` and returning it.
        reference: the same math in float64: the ground truth.
        baseline: PyTorch in the working dtype: error budget and speed comparison.
        problems: `max_numel -> Hypothesis strategy` of problems, edge cases included.
        problems_for_config: `(config, dtype, max_numel) -> strategy` of the problems a config can run on, for
            spaces where a config's constraints admit few of `problems`'s draws (a single-pass variant runs on
            one power-of-two class of row lengths): the gate draws from it (`problems_fitting`).
        make_inputs: builds the tensors of a problem in a dtype on a device, from a seed.
        bucket: the shape key stored in the database.
        cost: FLOPs and minimum bytes for a problem in a dtype.
        presets: problems `search` tunes when no shape is given (`interpreter_presets` without a GPU).
        parse_shape: turns a CLI `--shape` string into a problem.
        sources: the @triton.jit functions (or any Python objects) whose source defines the kernel.
        public: the public function applied to a problem's inputs, as a user calls it (benchmarks time it).
        bucket_edges: edge-case problems in (or next to) a problem's bucket that every config tuned
            for that bucket must pass: where a config only runs in its own bucket, random draws rarely land there.
        dtype_in_problem: the space's constraints depend on the dtype (shared memory per stage, tensor-core
            tile shapes): the problems they see carry it as problem["dtype"] ("fp32", "fp16", "bf16").
        vendor: the vendor library doing the same core work (cuBLAS GEMMs for the matmul family), applied to
            a problem's inputs: benchmarks report the tuned kernel's rate as a share of its rate.
        error_floor: per output element (float64, shaped like the outputs), the size its error is measured
            against where the reference itself is smaller: for a sum that cancels, the typical size of such a
            sum of its terms, not the leftover. Without it an error is relative to the reference value.
        distance: how far apart two of its bucket keys are, where the generic rule (`bucket_distance`: every
            field alike) misjudges which stored config suits a bucket with no row of its own.
        resources: what a config needs of the device on a problem (`autotune.device_limits.Resources`: shared
            memory, registers, TMA): a GPU served another GPU's rows drops the configs that do not fit it.
    """

    name: str
    space: SearchSpace
    launch: Callable[[Inputs, Config, torch.Tensor], torch.Tensor]
    reference: Callable[[Inputs], torch.Tensor]
    baseline: Callable[[Inputs], torch.Tensor]
    problems: Callable[[int], Any]
    make_inputs: Callable[[Problem, torch.dtype, torch.device, int], Inputs]
    bucket: Callable[[Problem], str]
    cost: Callable[[Problem, torch.dtype], Cost]
    presets: Sequence[Problem]
    parse_shape: Callable[[str], Problem]
    sources: Sequence[Any] = ()
    interpreter_presets: Sequence[Problem] = ()
    bucket_edges: Callable[[Problem], Sequence[Problem]] | None = None
    problems_for_config: Callable[[Config, torch.dtype, int], Any] | None = None
    public: Callable[[Inputs], Any] | None = None
    vendor: Callable[[Inputs], Any] | None = None
    error_floor: Callable[[Inputs], Any] | None = None
    distance: Callable[[str, str], float] | None = None
    resources: Callable[[Config, Problem], Any] | None = None
    dtype_in_problem: bool = False
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
    bound: str = "memory"  # "memory" or "compute": which roofline a result is judged against
    description: str = ""
    _hash: list[str] = field(default_factory=list, repr=False)

    @property
    def source_hash(self) -> str:
        """Hash of the kernel's source and search space: stored rows are tied to it."""
        if not self._hash:
            self._hash.append(_source_hash(self))
        return self._hash[0]

    def problem_for(self, problem: Problem, dtype: torch.dtype) -> Problem:
        """problem as the space's constraints see it in dtype: with problem["dtype"] set where they need it."""
        if not self.dtype_in_problem:
            return problem
        return {**problem, "dtype": DTYPE_NAMES[dtype]}

    def problems_fitting(self, config: Config, dtype: torch.dtype, max_numel: int) -> Any:
        """Hypothesis strategy of the problems drawn to check config in dtype: those it can run on where the
        kernel says which (`problems_for_config`), else all of `problems(max_numel)`."""
        if self.problems_for_config is None:
            return self.problems(max_numel)
        return self.problems_for_config(config, dtype, max_numel)

    def edges_for(self, problem: Problem) -> list[Problem]:
        """The problem itself and its bucket's edge cases."""
        return [problem, *(self.bucket_edges(problem) if self.bucket_edges else ())]

    def presets_here(self) -> Sequence[Problem]:
        """The preset problems for this machine: small ones under the interpreter, if the kernel has them."""
        from autotune import gpu

        if gpu.interpreter_active() and self.interpreter_presets:
            return self.interpreter_presets
        return self.presets

    def bucket_distance(self, a: str, b: str) -> float:
        """How far apart two bucket keys are (used to pick the nearest stored bucket): the kernel's own
        `distance` where it has one, else `bucket_distance`."""
        return (self.distance or bucket_distance)(a, b)


def _source_hash(spec: KernelSpec) -> str:
    digest = hashlib.sha256()
    for obj in spec.sources:
        fn = getattr(obj, "fn", obj)  # triton.JITFunction wraps the Python function as .fn
        try:
            digest.update(inspect.getsource(fn).encode())
        except (OSError, TypeError):
            digest.update(repr(obj).encode())
    digest.update(repr([(p.name, p.values) for p in spec.space.params]).encode())
    return digest.hexdigest()[:16]


SIZE_KEYS = ("batch", "m", "k", "h", "n")
"""The sizes of a problem without a `shape` (the matmul family's), in the order data flows through them."""


def shape_label(problem: Problem) -> str:
    """A problem's shape as `--shape` writes it: '4096x8192', '8192x4096x16384,bias,gelu_tanh', or
    '2x16/4x1:32768x128' and '4x16x4096x128+causal' (attention; rope's '1x32/8x4096x128'), or 'm=64,n=100'
    (@autotune.tune)."""
    if "shape" in problem:
        return "x".join(map(str, problem["shape"]))
    if "sizes" in problem:  # a kernel under @autotune.tune: its symbols' sizes
        return ",".join(f"{k}={v}" for k, v in problem["sizes"].items())
    if "head_dim" in problem:  # attention's (nq, nk), or rope's positions (seq)
        heads = f"{problem['heads']}" + (f"/{problem['kv_heads']}" if problem["kv_heads"] != problem["heads"] else "")
        nq = problem.get("nq", problem.get("seq"))
        lengths = f"{nq}" + (f":{problem['nk']}" if problem.get("nk", nq) != nq else "")
        causal = "+causal" if problem.get("causal") else ""
        return f"{problem['batch']}x{heads}x{lengths}x{problem['head_dim']}{causal}"
    options = ["bias"] if problem.get("bias") else []
    if problem.get("activation", "none") != "none":
        options.append(problem["activation"])
    return ",".join(["x".join(str(problem[d]) for d in SIZE_KEYS if problem.get(d)), *options])


def parse_sizes(text: str) -> list[int]:
    """'4096x8192' (or '4096*8192') -> [4096, 8192], for `--shape`."""
    try:
        sizes = [int(s) for s in text.lower().replace("*", "x").split("x")]
    except ValueError:
        raise ValueError(f"shape {text!r}: expected sizes separated by 'x', like 4096x8192") from None
    if any(s < 0 for s in sizes):
        raise ValueError(f"shape {text!r}: sizes must be >= 0")
    return sizes


def parse_bucket(key: str) -> dict[str, str]:
    """'m=4096,n=1024' -> {'m': '4096', 'n': '1024'}."""
    out = {}
    for part in key.split(","):
        name, _, value = part.partition("=")
        out[name.strip()] = value.strip()
    return out


def bucket_distance(a: str, b: str) -> float:
    """Distance between bucket keys of the same kernel: sum of |log2| differences of numeric fields;
    a field that differs and is not numeric makes the buckets incomparable (infinite distance)."""
    pa, pb = parse_bucket(a), parse_bucket(b)
    if pa.keys() != pb.keys():
        return float("inf")
    total = 0.0
    for k, va in pa.items():
        vb = pb[k]
        if va == vb:
            continue
        try:
            fa, fb = float(va), float(vb)
        except ValueError:
            return float("inf")
        if fa <= 0 or fb <= 0:
            total += abs(fa - fb)
        else:
            total += abs(_log2(fa) - _log2(fb))
    return total


@functools.cache
def _log2(x: float) -> float:
    import math

    return math.log2(x)
