"""How a spawned worker process (the evaluation worker, a compile-ahead worker) lives: Ctrl-C is its parent's
to handle, and it never outlives its parent. A parent killed outright (SIGKILL, a `timeout`) cannot stop its
workers, and since they left its process group nothing else does: each would stay, blocked on a queue, holding
its CUDA context and cached GPU inputs."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.resource_tracker
import os
import signal
import threading
import time

PARENT_CHECK_S = 0.5
"""How often a worker looks whether its parent is still alive."""


def become_worker() -> None:
    """In a worker process, first thing: leave the terminal's process group and ignore SIGINT (a terminal sends
    Ctrl-C to its whole foreground group; the parent stops its workers), and end this process and its own group
    (its compiler subprocesses: ptxas) as soon as the parent dies, however it dies."""
    if not hasattr(os, "setpgrp"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return  # no process groups (Windows): the parent's death is not watched
    # Leaving the group takes the compiler subprocesses along: an interrupted ptxas makes Triton print the whole PTX.
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # also drops a Ctrl-C held since the start (`starting_workers`)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    threading.Thread(target=_end_with_parent, args=(_parent_pid(),), name="end-with-parent", daemon=True).start()


@contextlib.contextmanager
def starting_workers():
    """Start worker processes inside: SIGINT is held (blocked) in this thread meanwhile, so a child spawned here
    starts with it held, and a Ctrl-C that comes while the child still imports (before `become_worker`) cannot
    end it with a traceback. A Ctrl-C held here reaches this thread as the block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks, no held start
        yield
        return
    # Started first: multiprocessing starts its resource tracker with the first process and unblocks SIGINT after.
    multiprocessing.resource_tracker.ensure_running()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _parent_pid() -> int:
    """The pid of the process that started this one. multiprocessing passes it to a spawned child, so a parent
    that died before this line still counts (os.getppid() would already name init or a subreaper)."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid is not None else os.getppid()


def _end_with_parent(parent: int) -> None:
    # The parent's pid, not a pipe from it: a pipe stays open while anything the parent forked holds its end.
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    if os.getpgrp() == os.getpid():  # the group this worker leads: itself and what it started
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
