"""`@autotune.tune(...)`: a Triton launcher made a kernel autotune verifies, searches and serves. The call looks up
the stored config for this GPU, dtype and bucket (exact, nearest, else the first config), memoized per exact
shape as the shipped kernels do, and launches with it."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import triton
from hypothesis.strategies import SearchStrategy

from autotune import runtime
from autotune.runtime import registry
from autotune.space import Problem, SearchSpace
from autotune.spec import DTYPE_NAMES, Cost, KernelSpec
from autotune.userkernel.arguments import Arguments, declare
from autotune.userkernel.build import build_spec, meta_result
from autotune.userkernel.compiled import compiled_call
from autotune.userkernel.configs import given_config, space_of_configs
from autotune.userkernel.problems import ProblemSpace


class TunedKernel:
    """A launcher under `@autotune.tune`: call it as the launcher, without `config` (or with one, to override
    the lookup); `.spec` is its KernelSpec, registered under `.spec.name`."""

    def __init__(
        self,
        fn: Callable,
        spec_of: Callable[[TunedKernel], KernelSpec],
        arguments: Arguments,
        problems: ProblemSpace,
        reference: Callable,
    ) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.spec = spec_of(self)
        self._arguments, self._problems = arguments, problems
        self._positions = tuple(arguments.positions.items())
        # The hot path takes the tensors in one C call where all are passed by position.
        indices = [i for _, i in self._positions]
        self._fewest_args = max(indices) + 1
        self._take = operator.itemgetter(*indices) if len(indices) > 1 else (lambda args, i=indices[0]: (args[i],))
        self._table = runtime.tuned(self.spec)
        self._compiled = compiled_call(
            self.spec.name, self, arguments, reference, _single_output(reference, arguments, self.spec)
        )

    def __call__(self, *args: Any, config: Any = None, **kwargs: Any) -> Any:
        if config is not None:
            return self.fn(*args, config=given_config(self.spec.name, self.spec.space, config), **kwargs)
        if self._compiled is not None and torch.compiler.is_compiling():
            return self._compiled(args, kwargs)  # the custom op; run, it calls back here (not compiling then)
        try:
            if len(args) >= self._fewest_args:
                tensors = self._take(args)
            else:
                tensors = [args[i] if i < len(args) else kwargs[name] for name, i in self._positions]
            shapes = tuple([t.shape for t in tensors])
            dtype = tensors[0].dtype
        except (IndexError, KeyError, AttributeError):
            try:
                self._arguments.signature.bind(*args, config=None, **kwargs)
            except TypeError as exc:  # a missing or unexpected argument
                raise TypeError(f"{self.spec.name}: {exc}") from None
            self._arguments.tensors_of(args, kwargs)  # an argument that is no tensor: TypeError
            raise
        config = self._table.lookup(dtype, shapes, lambda: self._bucket(dtype, shapes), lambda: self._problem(shapes))
        runtime.note_launch(self.spec.name, config)
        return self.fn(*args, config=config, **kwargs)

    def _problem(self, shapes: tuple[torch.Size, ...]) -> Problem:
        return self._problems.problem_of(self._arguments.sizes_of(shapes))

    def _bucket(self, dtype: torch.dtype, shapes: tuple[torch.Size, ...]) -> str:
        """The bucket of a call's shapes, checked first (once per exact shape: what the lookup memoizes)."""
        if dtype not in self.spec.dtypes:
            first = next(iter(self._arguments.tensors))
            raise TypeError(
                f"{self.spec.name}: {first} is {dtype}; tuned for "
                f"{', '.join(DTYPE_NAMES[d] for d in self.spec.dtypes)} (tune(dtypes=...))"
            )
        return self._problems.bucket(self._problem(shapes))

    def __repr__(self) -> str:
        return f"<autotune.tune kernel {self.spec.name!r} over {self.fn.__qualname__}>"


def _single_output(reference: Callable, arguments: Arguments, spec: KernelSpec) -> bool | None:
    """Whether the reference returns one tensor (not a tuple), from a run on meta tensors; None if unknown."""
    problem = next(iter(spec.interpreter_presets or spec.presets), None)
    result = None if problem is None else meta_result(reference, arguments, problem, spec.dtypes[0])
    return None if result is None else isinstance(result, torch.Tensor)


def tune(
    *,
    args: Mapping[str, Any],
    reference: Callable[..., Any],
    configs: Sequence[triton.Config] | None = None,
    space: SearchSpace | None = None,
    key: Sequence[str] | str | None = None,
    sizes: Mapping[str, int | tuple[int, int] | SearchStrategy] | None = None,
    dtypes: Sequence[torch.dtype | str] | None = None,
    problems: SearchStrategy | None = None,
    presets: Sequence[str | dict] | None = None,
    name: str | None = None,
    cost: Callable[[Problem, torch.dtype], Cost] | None = None,
    resources: Callable | None = None,
) -> Callable[[Callable], TunedKernel]:
    """Make a Triton launcher `def f(x, y, ..., *, config)` a kernel autotune verifies, searches and serves.

    Args:
        args: each argument the gate passes: `autotune.Tensor("m", "n")` (a tensor by symbolic sizes), a
            Hypothesis strategy (a scalar drawn per problem) or a value (passed as is).
        reference: the same math in PyTorch, called with the launcher's arguments (no config); the gate runs
            it in float64 (the truth) and in the working dtype (the error budget).
        configs: a `triton.Config` list as `triton.autotune` takes it; or `space`: a SearchSpace.
        key: the symbols that pick the bucket (default: all), each rounded up to a power of two.
        sizes: per symbol, a fixed size, a (lo, hi) range (lo 0: empty tensors are legal) or a strategy.
        dtypes: the working dtypes (default fp32, fp16, bf16); problems: a strategy of dicts of symbol sizes
            that replaces the drawn ones; presets: 'n=4096'-style problems `search` tunes by default.
        name: the kernel's name in the registry and the database (default: the launcher's).
        cost: (problem, dtype) -> Cost, for rates (default: every tensor read or written once).
        resources: (config, problem) -> autotune.device_limits.Resources, so a GPU served another GPU's rows
            drops the configs that do not fit it.
    """
    if (configs is None) == (space is None):
        raise TypeError("tune() takes configs= (a triton.Config list) or space= (a SearchSpace), exactly one")
    if not callable(reference):
        raise TypeError(f"tune(reference=...) must be callable, got {type(reference).__name__}")

    def wrap(fn: Callable) -> TunedKernel:
        kernel = name or fn.__name__
        if registry.is_shipped(kernel):
            raise ValueError(f"{kernel!r} is a shipped kernel's name: pass tune(name=...) to name yours")
        arguments = declare(kernel, fn, args)
        problem_space = ProblemSpace.build(arguments, sizes=sizes, key=key, problems=problems)
        if space is not None and not isinstance(space, SearchSpace):
            raise TypeError(f"{kernel}: space= must be an autotune.SearchSpace, got {type(space).__name__}")
        chosen = space if space is not None else space_of_configs(kernel, configs)

        def spec_of(tuned: TunedKernel) -> KernelSpec:
            return build_spec(
                fn,
                name=kernel,
                arguments=arguments,
                problems=problem_space,
                space=chosen,
                reference=reference,
                dtypes=dtypes,
                presets=presets,
                cost=cost,
                resources=resources,
                public=lambda inputs: tuned(**inputs),
            )

        tuned = TunedKernel(fn, spec_of, arguments, problem_space, reference)
        registry.register(tuned.spec, replace=True)  # a module imported again re-registers its kernels
        return tuned

    return wrap
