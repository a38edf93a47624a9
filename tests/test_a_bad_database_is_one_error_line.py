"""A file that is no autotune database this autotune reads (corrupt, cut short, empty, another program's, a
newer autotune's, damaged), a URL no database is behind, or rows that are not what they claim, all end a
command in one `Error: ...` line, with no traceback, and the files are left as they were."""

import os
import sqlite3

import database_files
import pytest
from click.testing import CliRunner

from autotune.cli import main

REFUSED = ["corrupt", "truncated", "empty", "foreign", "newer", "damaged"]
WHY = {
    "corrupt": "file is not a database",
    "truncated": "malformed",
    "empty": "is empty: not an autotune database",
    "foreign": "is not an autotune database",
    "newer": "schema version 99",
    "damaged": "no best_configs table",
}


def one_error_line(result, *fragments: str) -> str:
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (result.output, result.exception)
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


@pytest.mark.parametrize("kind", REFUSED)
def test_query_of_a_file_that_is_no_autotune_database(kind, tmp_path):
    path = database_files.make(kind, tmp_path / f"{kind}.sqlite")
    before = database_files.sha256(path)
    one_error_line(CliRunner().invoke(main, ["query", "vector_add", "--db", str(path)]), str(path), WHY[kind])
    assert database_files.sha256(path) == before


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://example.com/configs", "not a database URL autotune can open"),
        ("nosuchdialect://host/db", "not a database URL autotune can open"),
        ("postgresql://autotune:pw@127.0.0.1:1/none", "cannot open"),  # no server listens on port 1
    ],
)
def test_query_of_a_url_no_database_is_behind(url, why):
    line = one_error_line(CliRunner().invoke(main, ["query", "vector_add", "--db", url]), why)
    assert ":pw@" not in line


@pytest.mark.parametrize("kind", REFUSED)
def test_db_commands_refuse_a_file_that_is_no_autotune_database(kind, tmp_path):
    path = database_files.make(kind, tmp_path / f"{kind}.sqlite")
    source = database_files.exported(tmp_path / "source.sqlite")
    before = database_files.sha256(path)
    commands = [
        ["db", "prune", "--db", str(path)],
        ["db", "verify", "--db", str(path)],
        ["db", "upgrade", "--db", str(path)],
        ["db", "export", "--gpu", "H100", "-o", str(tmp_path / "out.sqlite"), "--db", str(path)],
    ]
    if kind != "empty":  # a merge or a search makes an empty file an autotune database (a new one, as mktemp makes)
        commands.append(["db", "merge", str(source), "--db", str(path)])
    for args in commands:
        one_error_line(CliRunner().invoke(main, args), str(path))
        assert database_files.sha256(path) == before, args
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, "source.sqlite"])


def _bad_row(path, sql: str):
    database_files.exported(path)
    with database_files.sqlite(path) as conn:
        conn.execute(sql)
    return path


BAD_ROWS = {
    "config not JSON": ("UPDATE best_configs SET config = '{BLOCK_SIZE: 256'", "config_json is not valid JSON"),
    "config a list": ("UPDATE best_configs SET config = '[256, 2, 3]'", "must be a JSON object"),
    "time_ms text": ("UPDATE best_configs SET time_ms = 'fast'", "time_ms must be a number, got 'fast'"),
    "time_ms negative": ("UPDATE best_configs SET time_ms = -1", "time_ms must be a positive"),
    "created_at garbage": ("UPDATE best_configs SET created_at = 'yesterday'", "created_at"),
    "examples text": ("UPDATE best_configs SET examples_verified = 'many'", "examples_verified must be an integer"),
}


@pytest.mark.parametrize("bad", list(BAD_ROWS))
def test_merge_of_rows_that_are_not_what_they_claim(bad, tmp_path, monkeypatch):
    sql, why = BAD_ROWS[bad]
    source = _bad_row(tmp_path / "bad.sqlite", sql)
    target = tmp_path / "target.sqlite"
    monkeypatch.setenv("AUTOTUNE_DB", str(target))
    one_error_line(CliRunner().invoke(main, ["db", "merge", str(source)]), "bad.sqlite: row 1", why, "nothing was")
    assert not target.exists()  # refused before the target was even opened


@pytest.mark.parametrize("kind", ["corrupt", "truncated", "empty", "foreign", "newer", "damaged"])
def test_merge_of_a_file_that_is_no_autotune_database(kind, tmp_path, monkeypatch):
    source = database_files.make(kind, tmp_path / f"{kind}.sqlite")
    target = database_files.valid(tmp_path / "target.sqlite")
    before = database_files.sha256(target)
    one_error_line(CliRunner().invoke(main, ["db", "merge", str(source), "--db", str(target)]), WHY[kind])
    assert database_files.sha256(target) == before


def test_a_foreign_file_given_as_the_target_gets_no_autotune_table(tmp_path):
    target = database_files.foreign(tmp_path / "theirs.sqlite")
    source = database_files.exported(tmp_path / "source.sqlite")
    one_error_line(
        CliRunner().invoke(main, ["db", "merge", str(source), "--db", str(target)]), "not an autotune database"
    )
    with database_files.sqlite(target) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["best_configs"]
    assert sorted(os.listdir(tmp_path)) == ["source.sqlite", "theirs.sqlite"]


def test_an_empty_file_becomes_an_autotune_database_only_when_written(tmp_path):
    path = database_files.empty(tmp_path / "new.sqlite")
    source = database_files.valid(tmp_path / "source.sqlite")
    result = CliRunner().invoke(main, ["db", "merge", str(source), "--db", str(path)])
    assert result.exit_code == 0 and "1 row(s) read, 1 taken" in result.output, result.output
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM best_configs").fetchone() == (1,)
    finally:
        conn.close()
