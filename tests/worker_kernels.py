"""Test-only kernels for worker processes: vector_add whose first launch in each process waits for the
other workers (so every worker surely runs a trial), and one that hangs on its first launch anywhere
(so a test knows a trial is running when it kills the worker)."""

from __future__ import annotations

import dataclasses
import os
import time

import autotune.kernels.vector_add.add as vector_add
from autotune.space import Param, SearchSpace

GATHER_ENV = "AUTOTUNE_TEST_GATHER"
"""'DIR:N': a process's first launch marks DIR and waits (up to two minutes) until N processes have."""
HANG_ENV = "AUTOTUNE_TEST_HANG_FILE"
"""Path of a file that the first launch creates, writing its process id, before it hangs (never returns)."""

SPACE = SearchSpace(
    (Param("BLOCK_SIZE", (128, 256, 512, 1024)), Param("num_warps", (4,)), Param("num_stages", (1,))),
    default={"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1},
)
_gathered: list[bool] = []


def _gather_launch(inputs, config, out):
    if os.environ.get(GATHER_ENV) and not _gathered:
        directory, count = os.environ[GATHER_ENV].rsplit(":", 1)
        open(os.path.join(directory, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 120
        while len(os.listdir(directory)) < int(count) and time.monotonic() < deadline:
            time.sleep(0.05)
        _gathered.append(True)
    return vector_add.launch(inputs, config, out)


def _hang_once_launch(inputs, config, out):
    path = os.environ.get(HANG_ENV)
    if path:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass  # another launch hangs already: this one runs
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            while True:
                time.sleep(60)
    return vector_add.launch(inputs, config, out)


GATHER_ADD = dataclasses.replace(vector_add.SPEC, name="gather_add", launch=_gather_launch, _hash=[])
HANG_ADD = dataclasses.replace(vector_add.SPEC, name="hang_add", space=SPACE, launch=_hang_once_launch, _hash=[])
