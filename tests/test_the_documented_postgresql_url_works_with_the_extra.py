"""The `postgresql://` URLs README and docs/ document work with what `pip install ".[postgres]"`
installs: the extra ships the driver
SQLAlchemy takes for that URL, and the URL in that form stores configs and Optuna studies on a real server."""

import pathlib
import re

import database_files
import optuna
import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from sqlalchemy import make_url

from autotune.cli import main
from autotune.db import ConfigStore

tomllib = pytest.importorskip("tomllib")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_postgres_extra_ships_the_driver_of_readmes_urls():
    documented = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    urls = [url for page in documented for url in re.findall(r"postgresql(?:\+\w+)?://[^\s`]+", page.read_text())]
    assert urls, "README and docs/ document no PostgreSQL URL"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    shipped = {Requirement(r).name for r in extras["postgres"]}
    for url in urls:
        driver = make_url(url).get_dialect().driver  # what this SQLAlchemy loads for the URL
        assert driver in shipped or f"{driver}-binary" in shipped, (url, driver, shipped)
        make_url(url).get_dialect().import_dbapi()  # and it is installed here


def test_a_url_in_readmes_form_keeps_configs_and_studies(postgres_url, postgres_server):
    assert make_url(postgres_url).drivername == "postgresql"  # the form README documents, no +driver
    with ConfigStore(postgres_url) as store:
        store.record_best(database_files.row())
    shown = CliRunner().invoke(main, ["query", "vector_add", "--db", postgres_url, "--format", "json"])
    assert shown.exit_code == 0 and '"n=8192"' in shown.output, shown.output
    storage = postgres_server.database()  # a database of its own: Optuna's tables are not autotune's
    study = optuna.create_study(study_name="documented-url", storage=storage)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    assert len(optuna.load_study(study_name="documented-url", storage=storage).trials) == 2
