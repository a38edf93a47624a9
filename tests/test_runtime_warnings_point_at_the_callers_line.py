"""The runtime's warnings name the line of the user's code that called the kernel, not a line of the runtime."""

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from stored_rows import store_best

import autotune.kernels.vector_add.add as vector_add
from autotune import db, gpu, runtime
from autotune.kernels import add
from autotune.runtime import lookup


@pytest.fixture
def fresh_process(user_db, tmp_path, monkeypatch):
    """No shipped database and nothing said yet, as in a new process."""
    monkeypatch.setattr(db, "shipped_path", lambda: tmp_path / "no-shipped.sqlite")
    monkeypatch.setattr(lookup, "_warned_no_rows", set())
    return user_db


def _warnings_of(call, category):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if issubclass(w.category, category)]


def test_no_tuned_configs_warning_names_the_call_here(fresh_process):
    x = torch.randn(300)
    said = _warnings_of(lambda: add(x, x), runtime.NoTunedConfigsWarning)
    assert len(said) == 1 and said[0].filename == __file__ and "add(x, x)" in _line(said[0]), said[0]


def test_stored_config_warning_names_the_call_here(fresh_process):
    store_best(fresh_process, vector_add.SPEC, "n=512", {"BLOCK_SIZE": 3})  # outside the space: ignored, said
    x = torch.randn(300)
    said = _warnings_of(lambda: add(x, x), runtime.StoredConfigWarning)
    assert len(said) == 1 and said[0].filename == __file__ and "add(x, x)" in _line(said[0]), said[0]


def _line(w) -> str:
    with open(w.filename) as f:
        return f.readlines()[w.lineno - 1]


@pytest.mark.skipif(not gpu.interpreter_active(), reason="the shipped database has rows for GPUs: no warning there")
def test_a_script_sees_its_own_line_under_the_warning(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from autotune.kernels import softmax
        y = softmax(torch.randn(4, 8), -1)
    """)
    )
    env = {**os.environ, "AUTOTUNE_DB": str(tmp_path / "none.sqlite")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{script}:4: NoTunedConfigsWarning: autotune: no tuned configs for softmax" in done.stderr, done.stderr
    assert "y = softmax(torch.randn(4, 8), -1)" in done.stderr and "runtime.py" not in done.stderr, done.stderr
