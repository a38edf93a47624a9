"""Compile ahead: worker processes build candidate configs' kernels into Triton's on-disk cache, so the
process that verifies and times them only loads them. Triton compilation is CPU-bound and one config
at a time leaves the GPU idle; a batch of configs compiles in the time of its slowest member.

Workers never run a kernel on the GPU: every `kernel[grid](...)` there is a Triton warmup (compile
only), so they cannot disturb the timings or corrupt the measuring process's GPU context. Under the
interpreter there is nothing to compile, and the kernels simply run in the workers.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures.process import BrokenProcessPool

import cachetools
import torch

from autotune.engine.worker_lifetime import become_worker, starting_workers
from autotune.gate.verify import draw_problems, tensor_bytes
from autotune.identity import config_key, problem_key
from autotune.space import Config, Problem
from autotune.spec import DTYPE_NAMES, KernelSpec

COMPILE_TIMEOUT_S = 300.0
"""A batch waits this long at most (by default); a config still compiling then is compiled when used."""
START_TIMEOUT_S = 300.0
"""A worker process's start: importing torch and Triton, and on a GPU its CUDA context."""


def default_workers() -> int:
    """Compile-ahead processes worth starting here: none under the interpreter, else up to 8."""
    from autotune import gpu

    if gpu.interpreter_active():
        return 0
    return max(0, min(8, (os.cpu_count() or 1) - 2))


def importable_name(spec: KernelSpec) -> str | None:
    """How a fresh process finds spec: its registry name, or `module:attr`; None if it cannot."""
    from autotune.runtime import registry

    if registry.is_shipped(spec.name):
        return spec.name
    module = sys.modules.get(getattr(spec.launch, "__module__", ""))
    if module is None or module.__name__ == "__main__":
        return None
    for attr, value in vars(module).items():
        if value is spec or _spec_of(value) is spec:
            return f"{module.__name__}:{attr}"
    return None


def _spec_of(value: object) -> object:
    """The spec of a launcher under @autotune.tune (its `.spec`); None for anything else."""
    try:
        return getattr(value, "spec", None)
    except Exception:  # a module attribute whose lookup fails is no kernel
        return None


class CompilePool:
    """Processes that compile candidate configs ahead of their measurement; one pool serves many studies."""

    def __init__(self, workers: int, *, timeout: float | None = None) -> None:
        self.workers = workers
        self.timeout = COMPILE_TIMEOUT_S if timeout is None else timeout
        self._pool = self._start()

    def _start(self) -> concurrent.futures.ProcessPoolExecutor:
        spawn = multiprocessing.get_context("spawn")
        pool = concurrent.futures.ProcessPoolExecutor(
            self.workers, mp_context=spawn, initializer=_start_worker, initargs=(spawn.Barrier(self.workers),)
        )
        with starting_workers():  # each submit starts a worker while none is idle
            readies = [pool.submit(_ready) for _ in range(self.workers)]
        # Every worker up before the first batch, so a batch's time limit counts compiling, not starting.
        concurrent.futures.wait(readies, timeout=START_TIMEOUT_S)
        return pool

    def compile(
        self, spec: KernelSpec, problems: Sequence[Problem], dtype: torch.dtype, configs: Iterable[Config]
    ) -> int:
        """Compile configs in parallel for every problem they will run on (each layout, alignment and size
        class is its own Triton specialization); returns how many built, once all are done (or timed out).
        Fewer configs than workers split their problems across the idle ones (a row's re-verification, a
        search's final check: one config, hundreds of problems)."""
        problems = list(problems)
        return self.compile_each(spec, dtype, [(config, problems) for config in configs])

    def compile_each(
        self, spec: KernelSpec, dtype: torch.dtype, work: Sequence[tuple[Config, Sequence[Problem]]]
    ) -> int:
        """`compile` with each config's own problems (the gate draws other problems for a config whose
        constraints reject some of the default's)."""
        name = importable_name(spec)
        if name is None:
            raise ValueError(f"kernel {spec.name!r} cannot be imported by a worker process: define it in a module")
        futures = []
        try:
            for config, problems in work:
                problems = list(problems)
                pieces = max(1, min(len(problems), -(-self.workers // max(1, len(work)))))
                chunks = [json.dumps(problems[i::pieces], sort_keys=True) for i in range(pieces)]
                futures.append(
                    [
                        self._pool.submit(_compile, name, chunk, DTYPE_NAMES[dtype], config_key(config))
                        for chunk in chunks
                    ]
                )
        except BrokenProcessPool:  # a worker died as the pool started: nothing built this time
            self._restart()
            return 0
        done, pending = concurrent.futures.wait([f for fs in futures for f in fs], timeout=self.timeout)
        if pending or any(isinstance(f.exception(), BrokenProcessPool) for f in done):
            self._restart()  # a compile that hangs or kills its process must not stall or break the next batch
        return sum(1 for fs in futures if all(f in done and f.exception() is None and f.result() is None for f in fs))

    def compile_for_verify(
        self,
        spec: KernelSpec,
        config: Config,
        dtype: torch.dtype,
        *,
        examples: int,
        seed: int,
        max_numel: int | None = None,
        extra_problems: Sequence[Problem] = (),
    ) -> bool:
        """Compile config for every problem `verify` with these arguments will check: the extra problems and
        the Hypothesis draws (the same seed draws the same); True if it built for all of them."""
        drawn = draw_problems(spec, config, dtype, examples=examples, seed=seed, max_numel=max_numel)
        return self.compile(spec, [spec.problem_for(p, dtype) for p in extra_problems] + drawn, dtype, [config]) == 1

    def _restart(self) -> None:
        self._stop()
        self._pool = self._start()

    def _stop(self) -> None:
        # ProcessPoolExecutor cannot stop a busy worker (shutdown, or the interpreter's exit, would wait on it):
        # kill them all.
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()

    def close(self) -> None:
        """Stop the workers now, compiles in flight included (a search interrupted mid-batch ends at once)."""
        self._stop()

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


MAX_CACHED_INPUT_BYTES = 1 << 30
"""What one worker keeps of problems' inputs and outputs between configs (its GPU memory is lost to the timing
and verifying process: workers held about 3 GiB each when one `db verify` ran out of memory)."""
_inputs = cachetools.LRUCache(MAX_CACHED_INPUT_BYTES, getsizeof=tensor_bytes)


def _start_worker(started: threading.Barrier) -> None:
    from autotune import gpu  # importing autotune picks the interpreter before Triton, as the parent did

    become_worker()

    if not gpu.interpreter_active():
        from triton.runtime.jit import KernelInterface

        def compile_only(self, grid):
            return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=True, **kwargs)

        KernelInterface.__getitem__ = compile_only
    started.wait(START_TIMEOUT_S)  # no worker takes a task before all have started: each takes one of _ready's


def _ready() -> None:
    """Worker: nothing; answering says the worker has started."""


def _compile(name: str, problems_json: str, dtype_name: str, config_json: str) -> str | None:
    """Worker: compile one config by 'launching' it on each problem's inputs; the first failure, if any."""
    import autotune
    from autotune import gpu
    from autotune.gate.compare import fresh_outputs
    from autotune.spec import dtype_from_name

    spec = autotune.get(name)
    config = json.loads(config_json)
    uncached = False
    try:
        for problem in json.loads(problems_json):
            if spec.space.rejects(config, problem):
                continue
            key = (name, problem_key(problem), dtype_name)
            if key in _inputs:
                inputs, out = _inputs[key]
            else:
                inputs = spec.make_inputs(problem, dtype_from_name(dtype_name), gpu.device(), 0)
                out = fresh_outputs(spec, inputs, spec.baseline(inputs), None)
                try:
                    _inputs[key] = (inputs, out)
                except ValueError:  # larger than the whole cache: used for this config only
                    uncached = True
            try:
                spec.launch(inputs, config, out)
            except Exception as exc:  # the parent meets the same failure and records it
                return f"{type(exc).__name__}: {exc}"[:300]
        return None
    finally:
        if uncached and gpu.device().type == "cuda":
            inputs = out = None
            torch.cuda.empty_cache()  # the GPU memory of inputs not kept goes back to the other processes
