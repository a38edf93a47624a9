"""Isolation: candidate configs compile, verify and run in a worker process, each under a time limit.

Some failures no `except` catches: a config that kills its process (a crash in a compiler, a launcher or
the driver), one that never returns, one whose illegal memory access leaves the CUDA context unusable
(the error is sticky: every later CUDA call in that process fails). So the search keeps its study and
its database in one process, and a long-lived worker holds the inputs, the float64 references and the
GPU context. A config that crashes the worker, runs past the trial limit or loses the worker's GPU
context is recorded as `crashed` or `timeout` with the reason, and a fresh worker takes the next one.
The search's own process never creates a CUDA context: it even asks a worker which GPU it measures.

Within `shared_workers()` (a command's studies one after another), a worker outlives its study: the next
study, in the same environment, binds it to its own problem instead of starting a process, importing torch
and creating a GPU context again. Outside it, and when it ends, no worker outlives its study.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import math
import multiprocessing
import os
import signal
import sys
import time
import warnings
import weakref
from collections.abc import Sequence
from multiprocessing.connection import wait

import torch

from autotune import gpu
from autotune.engine.evaluate import Evaluator
from autotune.engine.outcome import TrialOutcome
from autotune.engine.precompile import START_TIMEOUT_S, importable_name
from autotune.engine.worker_lifetime import become_worker, starting_workers
from autotune.gate.verify import Failure, KnownFailure, VerifyResult
from autotune.identity import Outcome, config_key
from autotune.runtime import registry
from autotune.space import Config, Problem
from autotune.spec import DTYPE_NAMES, KernelSpec, dtype_from_name

DEFAULT_TRIAL_TIMEOUT_S = 300.0
"""Per-config limit on compiling (unless compiled ahead), verifying and timing it. Generous: a config
that runs past it is lost, while a real hang costs it only once."""

WORKER_NAME = "autotune-evaluator"
"""The multiprocessing name of every evaluation worker process."""
_SPAWN = multiprocessing.get_context("spawn")  # a forked child would share this process's state


_idle: list[tuple[_Worker, tuple]] = []
"""At most one worker whose study has ended, with the environment it was started in (`_environment`)."""
_sharing = 0
"""How many `shared_workers()` blocks are open."""


@contextlib.contextmanager
def shared_workers():
    """Studies run in this block hand their evaluation worker on to the next one (see the module's text); on
    leaving it, the last one is stopped."""
    global _sharing
    _sharing += 1
    try:
        yield
    finally:
        _sharing -= 1
        if not _sharing:
            while _idle:
                _idle.pop()[0].stop()


class WorkerStartError(RuntimeError):
    """The evaluation worker did not start (the kernel does not load, or its inputs cannot be built)."""


def use_isolation(isolate: bool | None, trial_timeout: float | None, spec: KernelSpec) -> bool:
    """Whether a search evaluates its configs in a worker process: as asked; else whenever a trial time limit
    is given, and on a GPU if a worker can load the kernel by name (if not, it warns and runs unprotected)."""
    _check_trial_timeout(trial_timeout)
    if isolate is False and trial_timeout is not None:
        raise ValueError("trial_timeout needs isolate=True: only a worker process can be stopped mid-trial")
    if isolate is not None:
        return isolate
    if trial_timeout is not None:
        return True  # only a worker can be stopped mid-trial; one that cannot load the kernel says so
    # Under the interpreter there is no GPU context to lose, and a worker's start (a second torch import)
    # would double the many small searches a test suite runs.
    if gpu.interpreter_active():
        return False
    if worker_name(spec) is None:
        warnings.warn(
            f"kernel {spec.name!r} cannot be loaded by a worker process (define its KernelSpec at the top level "
            "of a module): its configs run in this process, unprotected from crashes and hangs",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


def _check_trial_timeout(trial_timeout: float | None) -> None:
    if trial_timeout is None:
        return
    if isinstance(trial_timeout, bool) or not isinstance(trial_timeout, (int, float)):
        raise TypeError(f"trial_timeout must be a number of seconds, got {type(trial_timeout).__name__}")
    if not (math.isfinite(trial_timeout) and trial_timeout > 0):
        raise ValueError(f"trial_timeout must be a positive, finite number of seconds, got {trial_timeout!r}")


def worker_name(spec: KernelSpec) -> str | None:
    """The name a worker process loads `spec` by, if that name gives back this very spec."""
    name = importable_name(spec)
    try:
        return name if name is not None and registry.get(name) is spec else None
    except registry.UnknownKernel:
        return None


@functools.cache
def worker_gpu() -> gpu.GPUInfo:
    """The device a worker process measures, learned without creating a CUDA context in this one."""
    if gpu.interpreter_active():
        return gpu.current_gpu()  # no CUDA involved
    return gpu_in_subprocess()


def gpu_in_subprocess() -> gpu.GPUInfo:
    """gpu.current_gpu() as a fresh process sees it."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=_SPAWN) as pool:
        with starting_workers():
            learned = pool.submit(gpu.current_gpu)
        return learned.result(timeout=START_TIMEOUT_S)


class IsolatedEvaluator(Evaluator):
    """An Evaluator whose configs compile, verify and run in a worker process, each within `trial_timeout`
    seconds; the worker also times PyTorch's baseline and re-verifies the winner."""

    def __init__(
        self,
        spec: KernelSpec,
        problem: Problem,
        dtype: torch.dtype,
        *,
        examples: int,
        seed: int,
        max_numel: int,
        trial_timeout: float | None = None,
        known_failures: Sequence[KnownFailure] = (),
    ):
        name = worker_name(spec)
        if name is None:
            raise ValueError(
                f"kernel {spec.name!r} cannot be loaded by a worker process: define its KernelSpec at the top "
                "level of a module, or search with isolate=False"
            )
        _check_trial_timeout(trial_timeout)
        self.trial_timeout = DEFAULT_TRIAL_TIMEOUT_S if trial_timeout is None else float(trial_timeout)
        self._args = (name, problem, DTYPE_NAMES[dtype], examples, seed, max_numel, list(known_failures))
        self._worker: _Worker | None = None
        super().__init__(
            spec, problem, dtype, examples=examples, seed=seed, max_numel=max_numel, known_failures=known_failures
        )

    def _prepare(self) -> None:
        reason = self._start()
        if reason is not None:
            raise WorkerStartError(f"{self.spec.name}: the evaluation worker did not start: {reason}")

    def _start(self) -> str | None:
        """Bind the idle worker to this problem, or start one, and wait until it holds its inputs; why not,
        if it could not."""
        started = time.perf_counter()
        worker = _take_idle()
        status, value = worker.call("bind", self._args, START_TIMEOUT_S) if worker else (None, None)
        if status != "ready":
            if worker is not None:
                worker.stop()  # it could not take this problem: a fresh process says why, or does better
            worker = _Worker(self._args)
            status, value = worker.receive(START_TIMEOUT_S)
        self._phase("worker_start", started)
        if status != "ready":
            worker.stop()
            return value
        self._worker = worker
        return None

    def close(self) -> None:
        """End this evaluator's use of its worker: stopped, or within `shared_workers()` kept for the next study."""
        if self._worker is not None:
            _park(self._worker)
            self._worker = None

    def _call(self, op: str, *args: object, limit: float) -> tuple[str, object]:
        """Run one request in the worker within `limit` seconds: ("ok", its value), ("failed", why it raised),
        ("crashed", why) or ("timeout", why); the worker is gone after the last two."""
        if self._worker is None:
            reason = self._start()
            if reason is not None:
                return "crashed", f"a fresh worker did not start: {reason}"
        status, value = self._worker.call(op, args, limit)
        if status in ("crashed", "timeout"):
            self._worker = None
            return status, f"{value}; a fresh worker takes the next config"
        return status, value

    def _verify_and_time(self, config: Config, number: int, started: float) -> TrialOutcome:
        status, value = self._call("evaluate", config, number, self.timing, limit=self.trial_timeout)
        if status != "ok":
            return TrialOutcome(number, config, Outcome.ERROR if status == "failed" else Outcome(status), value)
        outcome, examples_passed, problems_run, seconds = value
        if examples_passed is not None:
            self.examples_passed[config_key(config)] = examples_passed
        if not self._drawn:
            self._drawn = problems_run[1 + len(self.edges) :]
        for phase, spent in seconds.items():
            self.seconds[phase] = self.seconds.get(phase, 0.0) + spent
        return outcome

    def baseline_ms(self) -> float | None:
        status, value = self._call("baseline", limit=self.trial_timeout)
        return value if status == "ok" else None

    def reverify(self, config: Config, *, examples: int, seed: int) -> VerifyResult:
        limit = self.trial_timeout * max(1.0, examples / max(1, self.examples))  # more examples, more time
        status, value = self._call("reverify", config, examples, seed, limit=limit)
        if status == "ok":
            return value
        kind = "error" if status == "failed" else status
        return VerifyResult(self.spec.name, DTYPE_NAMES[self.dtype], config, 0, Failure({}, kind, value))


class _Worker:
    """One spawned process serving an Evaluator over a pipe."""

    def __init__(self, args: tuple) -> None:
        self.conn, child = _SPAWN.Pipe()
        self.process = _SPAWN.Process(target=_serve, args=(child, *args), name=WORKER_NAME)
        with starting_workers():
            self.process.start()
        child.close()  # the worker holds the only other end: its death reads as end of file here
        self.stop = weakref.finalize(self, _end, self.process, self.conn)

    def call(self, op: str, args: tuple, limit: float) -> tuple[str, object]:
        try:
            self.conn.send((op, args))
        except OSError:  # it died between requests: the reply that never comes says how
            pass
        return self.receive(limit)

    def receive(self, limit: float) -> tuple[str, object]:
        """The worker's next reply within `limit` seconds, or why none came (crashed or timeout)."""
        ready = wait([self.conn, self.process.sentinel], limit)
        if self.conn in ready:
            try:
                status, value = self.conn.recv()
            except (EOFError, OSError):
                pass  # it died before or while replying
            else:
                if status != "lost":
                    return status, value
                self.stop()
                return "crashed", f"{value}: the worker's GPU context is lost"
        if not ready:
            self.process.kill()
            self.stop()
            return "timeout", f"no result within the {limit:g} s limit: the worker was killed"
        self.process.join(5)  # end of file can come a moment before the exit code
        how = _exit_description(self.process.exitcode)
        self.stop()
        return "crashed", f"the worker {how}"


def _environment() -> tuple:
    """What a spawned worker inherits and a later study may have changed: import path and variables."""
    return tuple(sys.path), tuple(sorted(os.environ.items()))


def _park(worker: _Worker) -> None:
    """Keep worker for the next study (stopping the one kept before) inside `shared_workers()`, if it is
    still alive; else stop it."""
    while _idle:
        _idle.pop()[0].stop()
    if _sharing and worker.process.is_alive():
        _idle.append((worker, _environment()))
    else:
        worker.stop()


def _take_idle() -> _Worker | None:
    """The idle worker, if there is one started in this environment and alive; a stale one is stopped."""
    if not _idle:
        return None
    worker, environment = _idle.pop()
    if environment == _environment() and worker.process.is_alive():
        return worker
    worker.stop()
    return None


def _end(process: multiprocessing.process.BaseProcess, conn) -> None:
    conn.close()  # a worker waiting for a request reads end of file and exits
    process.join(10)
    if process.is_alive():
        process.kill()
        process.join(10)


def _exit_description(code: int | None) -> str:
    if code is None:
        return "closed its pipe and did not exit"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _build(
    name: str,
    problem: Problem,
    dtype_name: str,
    examples: int,
    seed: int,
    max_numel: int,
    known_failures: Sequence[KnownFailure] = (),
) -> Evaluator:
    """The worker's Evaluator of one problem: its inputs, references and drawn problems."""
    return Evaluator(
        registry.get(name),
        problem,
        dtype_from_name(dtype_name),
        examples=examples,
        seed=seed,
        max_numel=max_numel,
        known_failures=known_failures,
    )


def _serve(conn, *args) -> None:
    """Worker: build the Evaluator (inputs, references) of args, then answer requests until the pipe
    closes; "bind" builds another problem's Evaluator in its place (the next study's)."""
    become_worker()
    try:
        evaluator = _build(*args)
    except Exception as exc:
        _reply(conn, ("failed", _describe(exc)))
        return
    if not _reply(conn, ("ready", None)):
        return
    while True:
        try:
            op, args = conn.recv()
        except EOFError:
            return
        try:
            if op == "bind":
                evaluator = None  # the old problem's inputs and references go before the new ones come
                evaluator = _build(*args)
                reply = ("ready", None)  # as a fresh worker says it
            else:
                reply = ("ok", _HANDLERS[op](evaluator, *args))
        except Exception as exc:  # whatever escaped the evaluator is this request's failure, not the worker's
            reply = ("failed", _describe(exc))
        fault = _gpu_fault()
        if fault is not None:
            _reply(conn, ("lost", fault))
            os._exit(1)  # tearing a broken context down can hang or crash: leave at once
        if not _reply(conn, reply):
            return


def _reply(conn, message: tuple) -> bool:
    """Send message to the parent; False if it has closed the pipe (stopped this worker mid-request: Ctrl-C)."""
    try:
        conn.send(message)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def _evaluate(evaluator: Evaluator, config: Config, number: int, timing: dict) -> tuple:
    evaluator.timing = timing
    before = evaluator.seconds.get("time", 0.0)
    outcome = evaluator(config, number)
    passed = evaluator.examples_passed.get(config_key(config))
    return outcome, passed, evaluator.problems_run, {"time": evaluator.seconds.get("time", 0.0) - before}


def _reverify(evaluator: Evaluator, config: Config, examples: int, seed: int) -> VerifyResult:
    return evaluator.reverify(config, examples=examples, seed=seed)


_HANDLERS = {"evaluate": _evaluate, "baseline": Evaluator.baseline_ms, "reverify": _reverify}


def _gpu_fault() -> str | None:
    """Why this process's CUDA context is unusable (a sticky error such as an illegal address), or None."""
    if not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
        torch.ones(1, device=gpu.device()).add_(1).item()
    except Exception as exc:  # any failure here means the context cannot be trusted
        return _describe(exc)
    return None


def _describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
