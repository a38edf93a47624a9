"""A GPU with no rows for a kernel in any database falls back to the default config and says so once per
process, not on every call."""

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
    """No shipped database (on a GPU machine it holds rows) and nothing said yet, as in a new process."""
    monkeypatch.setattr(db, "shipped_path", lambda: tmp_path / "no-shipped.sqlite")
    monkeypatch.setattr(lookup, "_warned_no_rows", set())
    return user_db


def _no_rows_warnings(calls) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the runtime's own once-per-process rule is what is tested
        for n, dtype in calls:
            x = torch.randn(n, dtype=dtype)
            with runtime.record_launches() as launches:
                add(x, x)
            assert launches == [("vector_add", vector_add.SPACE.default)]
            runtime.clear_cache()  # every call reads the databases again
    return [str(w.message) for w in caught if issubclass(w.category, runtime.NoTunedConfigsWarning)]


def test_a_gpu_without_rows_says_so_once_however_many_calls(fresh_process):
    said = _no_rows_warnings(
        [(5000, torch.float32), (100, torch.float32), (70000, torch.float16), (5000, torch.float32)]
    )
    assert len(said) == 1
    assert "vector_add" in said[0] and gpu.current_gpu().name in said[0] and "default config" in said[0]


def test_a_gpu_with_rows_of_the_kernel_says_nothing(fresh_process):
    store_best(fresh_process, vector_add.SPEC, "n=8192", vector_add.SPACE.default, dtype="fp16")
    assert _no_rows_warnings([(5000, torch.float32)]) == []  # no fp32 row, but the GPU has rows of this kernel
