import os

import pytest
from hypothesis import settings

import autotune  # noqa: F401  (selects the Triton interpreter before anything imports Triton)
from autotune import runtime

settings.register_profile("ci", max_examples=25, derandomize=True, deadline=None, database=None)
settings.register_profile("deep", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def user_db(tmp_path, monkeypatch):
    """A fresh user config database (a real SQLite file) that the runtime and CLI read by default."""
    path = tmp_path / "autotune.sqlite"
    monkeypatch.setenv("AUTOTUNE_DB", str(path))
    runtime.clear_cache()
    yield path
    runtime.clear_cache()


@pytest.fixture
def no_autograd_cache():
    """torch.compile without AOTAutograd's cache, which keys a backward graph by the forward graph, not by
    the Python autograd formula registered for a custom op: after that formula changes, a warm cache would
    replay the old one. (A torch config is patched through its own context manager: monkeypatch's undo
    deletes the entry, and every later compile fails.)"""
    import torch._functorch.config

    with torch._functorch.config.patch(enable_autograd_cache=False):
        yield


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
