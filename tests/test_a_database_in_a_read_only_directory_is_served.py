"""A user database in WAL mode (as a search leaves it) in a directory this process cannot write is still read:
the runtime serves its rows and `query` shows them, and nothing is created there."""

import json
import os
import shutil
import subprocess
import sys

import database_files
import pytest

READER = """
import json, sys, torch
from click.testing import CliRunner
from autotune import runtime
from autotune.cli import main
from autotune.kernels import add

x = torch.randn(5000)
with runtime.record_launches() as launches:
    assert torch.equal(add(x, x), x + x)
shown = CliRunner().invoke(main, ["query", "vector_add", "--format", "json"])
print(json.dumps({"launched": launches[0][1], "query_exit": shown.exit_code, "query": shown.output}))
"""


def test_a_wal_database_in_a_read_only_directory_is_served_and_left_alone(tmp_path):
    folder = tmp_path / "readonly"
    folder.mkdir()
    path = database_files.valid(folder / "user.sqlite")
    with database_files.sqlite(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert sorted(os.listdir(folder)) == ["user.sqlite"]  # the last writer took its -wal and -shm files away
    before = database_files.sha256(path)
    prefix = []
    if os.geteuid() == 0:  # root writes anywhere unless it drops the capability to
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: a read-only directory cannot be made here")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    folder.chmod(0o555)
    try:
        run = subprocess.run(
            [*prefix, sys.executable, "-c", READER],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "AUTOTUNE_DB": str(path)},
        )
    finally:
        folder.chmod(0o755)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.splitlines()[-1])
    assert seen["launched"] == database_files.STORED
    assert seen["query_exit"] == 0 and json.loads(seen["query"])[0]["config"] == json.dumps(database_files.STORED)
    assert "unreadable" not in run.stderr
    assert sorted(os.listdir(folder)) == ["user.sqlite"] and database_files.sha256(path) == before
