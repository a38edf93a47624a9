"""The kernel contract: everything autotune needs to verify, search and ship one kernel."""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch

from autotune.space import Config, Problem, SearchSpace, within

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


@dataclass(frozen=True)
class EarlierSpace:
    """An earlier version of a kernel that its spec extends (`KernelSpec.extends`): the `sources` it had, in the
    order it listed them (the same function objects the spec lists now, so editing one changes this version's hash
    too), and its parameters' values then, in the space's order. Rows stored under its hash stay current wherever
    their config lies in it: the code they were measured and verified with is still there, unchanged.

    `new`: the parameters the space gained since, each with the one value the earlier configs meant (the engine
    they ran on, say): configs stored then lack those keys, and read as having those values (`complete`)."""

    sources: Sequence[Any]
    params: Mapping[str, Sequence[Any]]
    new: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def before(
        cls, space: SearchSpace, sources: Sequence[Any], new: Mapping[str, Any] | None = None, **values: Sequence[Any]
    ) -> EarlierSpace:
        """space's parameters as they were before values were added: those named take the given values (the
        `variant` list before the new variant, say), those in `new` did not exist yet (their value there is what
        the earlier configs meant), the others had their values now."""
        new = dict(new or {})
        unknown = sorted((set(values) | set(new)) - set(space.names))
        if unknown:
            raise ValueError(f"EarlierSpace.before: {unknown} are not parameters of the space; expected {space.names}")
        both = sorted(set(values) & set(new))
        if both:
            raise ValueError(f"EarlierSpace.before: {both} are new (one earlier value each), not given values too")
        params = {p.name: tuple(values.get(p.name, p.values)) for p in space.params if p.name not in new}
        return cls(tuple(sources), params, new)

    @functools.cached_property
    def source_hash(self) -> str:
        """The hash the spec had with these sources and parameters (`_source_hash` of that earlier spec, whose
        space had no `new` parameters)."""
        return _hash_of(self.sources, [(name, tuple(values)) for name, values in self.params.items()])

    def complete(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """config as the space now reads it: the parameters new since set to their earlier values where absent."""
        return {**config, **{name: value for name, value in self.new.items() if name not in config}}

    def holds(self, config: Mapping[str, Any]) -> bool:
        """Whether this earlier space could have produced config: its parameters, each value one of theirs (the
        new parameters absent, or at their earlier values)."""
        return within(self.complete(config), {**self.params, **{name: (v,) for name, v in self.new.items()}})


class StoredRow(Protocol):
    """What `KernelSpec.current_rows` reads of a stored row (`autotune.db.BestRow` is one)."""

    source_hash: str
    gpu: str
    dtype: str
    bucket: str

    @property
    def config(self) -> dict[str, Any]: ...


Row = TypeVar("Row", bound=StoredRow)


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
        extends: earlier versions of this spec whose stored rows still hold (`EarlierSpace`), oldest first: a
            variant added to `sources` and to the space leaves the rows tuned before it current (`is_current`);
            a bucket's row of a newer version serves before an older one's (`current_rows`).
        outputs: `(inputs, base) -> outputs`, unset, laid out as the public function allocates them, where that is
            not dense in row-major order (base: the baseline's outputs, for their shapes and dtypes): the gate
            poisons and the search times the launch into these (`autotune.gate.compare.fresh_outputs`).
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
    extends: Sequence[EarlierSpace] = ()
    outputs: Callable[[Inputs, Any], Any] | None = None
    _hash: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        for i, earlier in enumerate(self.extends):
            _check_earlier(self, f"extends[{i}]", earlier)

    @property
    def source_hash(self) -> str:
        """Hash of the kernel's source and search space: stored rows are tied to it."""
        if not self._hash:
            self._hash.append(_source_hash(self))
        return self._hash[0]

    @property
    def current_hashes(self) -> tuple[str, ...]:
        """The source hashes whose rows may be current (`is_current`): this spec's own, then its earlier spaces'."""
        return (self.source_hash, *(e.source_hash for e in self.extends if e.source_hash != self.source_hash))

    def is_current(self, source_hash: str, config: Mapping[str, Any] | None) -> bool:
        """Whether a row stored under source_hash with config holds for this spec: it was tuned for this source,
        or for an earlier space this spec extends that could have produced config (None: not known)."""
        if source_hash == self.source_hash:
            return True
        return config is not None and any(e.source_hash == source_hash and e.holds(config) for e in self.extends)

    def row_is_current(self, row: StoredRow) -> bool:
        """`is_current` of a stored row (one whose config does not read is current only under this source)."""
        if row.source_hash == self.source_hash:
            return True
        if row.source_hash not in self.current_hashes:
            return False
        try:
            config = row.config
        except ValueError:
            return False
        return self.is_current(row.source_hash, config)

    def current_config(self, row: StoredRow) -> dict[str, Any]:
        """row's config as this spec's space reads it: a row of an earlier space it `extends` completed with the
        values of the parameters new since (`EarlierSpace.complete`); else as stored. Not validated; ValueError
        where the stored JSON is no object."""
        config = row.config
        if row.source_hash != self.source_hash:
            for earlier in self.extends:
                if earlier.source_hash == row.source_hash:
                    return earlier.complete(config)
        return config

    def current_rows(self, rows: Iterable[Row]) -> list[Row]:
        """rows that are current for this spec (`is_current`), in order, less each row whose (gpu, dtype, bucket)
        also has a row of a newer version: this source's, else a later earlier space's (`extends` lists them
        oldest first). A search of the newer space stored that one, with the older one's configs to draw from."""
        rows = [row for row in rows if self.row_is_current(row)]
        newest: dict[tuple[str, str, str], int] = {}
        for row in rows:
            key = (row.gpu, row.dtype, row.bucket)
            newest[key] = min(newest.get(key, len(self.extends) + 1), self.age(row.source_hash))
        return [r for r in rows if self.age(r.source_hash) == newest[(r.gpu, r.dtype, r.bucket)]]

    def age(self, source_hash: str) -> int:
        """How many versions old a row stored under source_hash is: 0 for this source, 1 for the newest earlier
        space it extends, 2 for the one before, ...; past them all for any other hash."""
        if source_hash == self.source_hash:
            return 0
        hashes = [e.source_hash for e in self.extends]
        return len(hashes) - hashes.index(source_hash) if source_hash in hashes else len(hashes) + 1

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
    return _hash_of(spec.sources, [(p.name, p.values) for p in spec.space.params])


def _hash_of(sources: Sequence[Any], params: Sequence[tuple[str, Any]]) -> str:
    """The source hash of sources and the space's (name, values) pairs: what a stored row is tied to."""
    digest = hashlib.sha256()
    for obj in sources:
        fn = getattr(obj, "fn", obj)  # triton.JITFunction wraps the Python function as .fn
        try:
            digest.update(inspect.getsource(fn).encode())
        except (OSError, TypeError):
            digest.update(repr(obj).encode())
    digest.update(repr(list(params)).encode())
    return digest.hexdigest()[:16]


def _check_earlier(spec: KernelSpec, where: str, earlier: EarlierSpace) -> None:
    """ValueError unless earlier is an earlier version of spec: some of its sources (the same objects), its
    parameters, each with some of its values."""
    if not isinstance(earlier, EarlierSpace):
        raise ValueError(f"{spec.name}: {where} must be an EarlierSpace, got {type(earlier).__name__}")
    strangers = [repr(getattr(s, "__name__", s)) for s in earlier.sources if not any(s is t for t in spec.sources)]
    if strangers:
        raise ValueError(f"{spec.name}: {where}.sources {strangers} are not among the spec's sources (same objects)")
    strangers = sorted(set(earlier.new) - set(spec.space.names))
    if strangers:
        raise ValueError(f"{spec.name}: {where}.new names {strangers}, not parameters of the space {spec.space.names}")
    names = tuple(n for n in spec.space.names if n not in earlier.new)
    if tuple(earlier.params) != names:
        raise ValueError(
            f"{spec.name}: {where}.params names {list(earlier.params)}; expected the space's {list(names)}"
        )
    now = {p.name: p.values for p in spec.space.params}
    for name, value in earlier.new.items():
        if not within({name: value}, {name: now[name]}):
            raise ValueError(f"{spec.name}: {where}.new[{name!r}] is {value!r}, not a value of the space now")
    for name, values in earlier.params.items():
        extra = [v for v in values if not within({name: v}, {name: now[name]})]
        if extra:
            raise ValueError(f"{spec.name}: {where}.params[{name!r}] has {extra}, not values of the space now")


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
