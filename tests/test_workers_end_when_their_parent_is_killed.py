"""A retune killed outright (SIGKILL to it alone, as `timeout -k` sends after its SIGTERM) leaves no worker behind:
the evaluation worker and the compile-ahead workers left its process group (Ctrl-C is the parent's), so nothing
else would end them, and on a GPU each holds its CUDA context and cached inputs."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys, torch
    import autotune
    from autotune.db import ConfigStore
    from autotune.engine import retune as retuning
    from autotune.engine.plan import SearchOptions

    if __name__ == "__main__":
        with ConfigStore(sys.argv[1]) as store:
            retuning.retune(
                [autotune.get("softmax")],
                budget_s=600,
                store=store,
                options=SearchOptions(trials=50, examples=20, final_examples=20, isolate=True),
                dtypes=(torch.float32,),
                compile_workers=2,
                on_start=lambda study, i, n: print("started", study.label, flush=True),
            )
    """
)
GROUP_SCRIPT = textwrap.dedent(
    """
    import multiprocessing, subprocess, sys, time
    from autotune.engine.worker_lifetime import become_worker

    def work():
        become_worker()
        compiler = subprocess.Popen(["sleep", "120"])  # stands for a ptxas the worker waits on
        print(multiprocessing.current_process().pid, compiler.pid, flush=True)
        compiler.wait()

    if __name__ == "__main__":
        worker = multiprocessing.get_context("spawn").Process(target=work)
        worker.start()
        worker.join()
    """
)
WORKERS = 3
"""Two compile-ahead workers and the evaluation worker."""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """State, parent pid and start time of pid, or None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def _spawned_children(parent: int) -> dict[int, int]:
    """The multiprocessing-spawned children of parent (its workers): pid -> start time."""
    children = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        try:
            spawned = b"spawn_main" in (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if stat is not None and stat[1] == parent and spawned:
            children[int(entry.name)] = stat[2]
    return children


def _alive(workers: dict[int, int]) -> list[int]:
    """Those of workers still running: same pid and start time (a reused pid is another process), not a zombie
    (an orphan's new parent reaps it when it will)."""
    alive = []
    for pid, started in workers.items():
        stat = _stat(pid)
        if stat is not None and stat[2] == started and stat[0] not in "ZX":
            alive.append(pid)
    return alive


def test_workers_end_when_their_parent_is_killed(tmp_path):
    script = tmp_path / "retune_then_killed.py"
    script.write_text(SCRIPT)
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "r.sqlite")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        start_new_session=True,  # nothing sent to this test's process group reaches it
    )
    workers: dict[int, int] = {}
    try:
        assert process.stdout.readline().startswith("started softmax fp32")
        deadline = time.monotonic() + 60
        while len(workers) < WORKERS and time.monotonic() < deadline:
            workers = _spawned_children(process.pid)
            time.sleep(0.2)
        assert len(workers) == WORKERS, f"workers found: {workers}"

        os.kill(process.pid, signal.SIGKILL)  # the parent alone, not its process group
        process.wait(10)
        deadline = time.monotonic() + 10
        while _alive(workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(workers), f"workers {_alive(workers)} outlived their killed parent"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in _alive(workers):  # each leads its own process group
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def test_a_workers_subprocesses_end_with_it(tmp_path):
    script = tmp_path / "worker_with_a_compiler.py"
    script.write_text(GROUP_SCRIPT)
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    started: dict[int, int] = {}
    try:
        pids = [int(pid) for pid in process.stdout.readline().split()]
        started = {pid: _stat(pid)[2] for pid in pids}
        assert len(_alive(started)) == 2

        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        deadline = time.monotonic() + 10
        while _alive(started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(started), f"{_alive(started)} outlived the worker's killed parent"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in _alive(started):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
