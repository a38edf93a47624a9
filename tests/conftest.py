import importlib
import importlib.util
import os
import pathlib
import sys

import pytest
from hypothesis import settings

import autotune  # noqa: F401  (selects the Triton interpreter before anything imports Triton)
from autotune import runtime

settings.register_profile("ci", max_examples=25, derandomize=True, deadline=None, database=None)
settings.register_profile("deep", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server on loopback for the session. Where none can be started the tests that
    need it skip, except in CI (CI=true), where they fail: CI installs Debian's postgresql package."""
    from postgres_server import PostgresServer, ServerUnavailable

    try:
        importlib.import_module("psycopg")  # SQLAlchemy's default PostgreSQL driver: the `postgres` extra
        server = PostgresServer.start()
    except (ImportError, ServerUnavailable) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the PostgreSQL tests: {exc}")
        pytest.skip(f"no PostgreSQL server here: {exc}")
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The SQLAlchemy URL of a fresh, empty database on the session's PostgreSQL server."""
    return postgres_server.database()


@pytest.fixture
def user_db(tmp_path, monkeypatch):
    """A fresh user config database (a real SQLite file) that the runtime and CLI read by default."""
    path = tmp_path / "autotune.sqlite"
    monkeypatch.setenv("AUTOTUNE_DB", str(path))
    runtime.clear_cache()
    yield path
    runtime.clear_cache()


@pytest.fixture(scope="session")
def benchmark_script():
    """Loads benchmarks/NAME.py as a module (the scripts are not a package), once per session."""
    loaded = {}

    def load(name: str):
        if name not in loaded:
            path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
            if str(path.parent) not in sys.path:  # a script imports the modules beside it (config_probe)
                sys.path.append(str(path.parent))
            spec = importlib.util.spec_from_file_location(name, path)
            loaded[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(loaded[name])
        return loaded[name]

    return load


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
