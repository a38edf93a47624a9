"""Running a compile script of tests/ with the GPU machine's Triton, without a GPU: where that Triton is
(AUTOTUNE_GPU_TRITON, a directory made by `pip install -q --no-deps --target DIR triton==3.6.0`; .ci/run makes
one), skipped where it is unset, failed in CI."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

GPU_TRITON_VERSION = "3.6.0"
"""The Triton of the GPU machine (H100): what .ci/run installs and README tells to install."""
ROOT = pathlib.Path(__file__).resolve().parents[1]


def gpu_triton_dir(what: str) -> pathlib.Path:
    """The directory holding the GPU's Triton package; the test is skipped without one (failed in CI, where
    `what` must be checked)."""
    where = os.environ.get("AUTOTUNE_GPU_TRITON")
    if not where:
        reason = (
            f"AUTOTUNE_GPU_TRITON is not set: `pip install -q --no-deps --target DIR "
            f"triton=={GPU_TRITON_VERSION}` and point it at DIR to compile for the GPU"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must check that {what}: {reason}")
        pytest.skip(reason)
    path = pathlib.Path(where).resolve()
    if not (path / "triton" / "__init__.py").is_file():
        pytest.fail(f"AUTOTUNE_GPU_TRITON={where} holds no triton package")
    return path


def run_compile_script(script: str, what: str, cache: pathlib.Path, timeout: float = 600) -> tuple[dict, list[dict]]:
    """tests/SCRIPT run with the GPU's Triton from a fresh kernel cache (`cache`): its header line (the Triton it
    used) and its JSON line per case."""
    gpu_triton = gpu_triton_dir(what)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # conftest's autotune import set it
    env.update(
        PYTHONPATH=os.pathsep.join([str(gpu_triton), str(ROOT), str(ROOT / "tests")]),
        TRITON_CACHE_DIR=str(cache),
    )
    run = subprocess.run(
        [sys.executable, str(ROOT / "tests" / script), str(gpu_triton)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, f"{script} exited with {run.returncode}:\n{run.stderr[-4000:]}"
    header, *lines = [json.loads(line) for line in run.stdout.splitlines()]
    return header, lines
