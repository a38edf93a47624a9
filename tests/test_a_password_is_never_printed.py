"""A database URL's password never appears in what autotune prints: query's `source` column (table and JSON),
the runtime's warnings, a command's errors."""

import warnings

import database_files
import pytest
import torch
from click.testing import CliRunner
from sqlalchemy import make_url

from autotune import runtime
from autotune.cli import main
from autotune.db import ConfigStore, masked_url
from autotune.kernels import add

SECRET = "s3cret-pw"


@pytest.fixture
def url_with_password(postgres_url) -> str:
    """A PostgreSQL database holding one vector_add row; the test server trusts loopback, so any password does."""
    url = make_url(postgres_url).set(password=SECRET).render_as_string(hide_password=False)
    with ConfigStore(url) as store:
        store.record_best(database_files.row())
    return url


def test_masked_url_hides_only_the_password():
    assert masked_url(f"postgresql://me:{SECRET}@host:5432/db") == "postgresql://me:***@host:5432/db"
    assert masked_url("postgresql://me@host/db") == "postgresql://me@host/db"
    assert masked_url("sqlite:////tmp/a b.sqlite") == "sqlite:////tmp/a b.sqlite"
    assert SECRET not in masked_url(f"postgresql://me:{SECRET}@host:notaport/db")  # one SQLAlchemy cannot parse


def test_query_shows_the_database_without_its_password(url_with_password, monkeypatch):
    masked = make_url(url_with_password).render_as_string(hide_password=True)
    for args in (
        ["query", "vector_add", "--db", url_with_password],
        ["query", "vector_add", "--db", url_with_password, "--format", "json"],
        ["query", "vector_add", "--db", url_with_password, "--format", "csv"],
    ):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0 and masked in result.output and SECRET not in result.output, result.output
    monkeypatch.setenv("AUTOTUNE_DB", url_with_password)
    result = CliRunner().invoke(main, ["query", "vector_add"])
    assert result.exit_code == 0 and masked in result.output and SECRET not in result.output


def test_the_runtime_serves_it_and_warns_without_the_password(url_with_password, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", url_with_password)
    runtime.clear_cache()
    with runtime.record_launches() as launches:
        add(torch.ones(5000), torch.ones(5000))
    assert launches[0][1] == database_files.STORED
    missing = make_url(url_with_password).set(database="no_such_database").render_as_string(hide_password=False)
    monkeypatch.setenv("AUTOTUNE_DB", missing)
    runtime.clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        add(torch.ones(5000), torch.ones(5000))
    runtime.clear_cache()
    said = " ".join(str(w.message) for w in caught)
    assert "no_such_database" in said and "***" in said and SECRET not in said
    result = CliRunner().invoke(main, ["query", "vector_add"])
    assert result.exit_code == 1 and result.output.startswith("Error: ") and SECRET not in result.output
