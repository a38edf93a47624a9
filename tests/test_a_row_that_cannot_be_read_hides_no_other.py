"""One stored row that cannot be read (a date that does not parse, text where a number belongs) is skipped
alone, with a warning naming it: the kernel's other rows in that database are still served and shown."""

import json

import database_files
import pytest
import torch
from click.testing import CliRunner

from autotune import runtime
from autotune.cli import main
from autotune.db import ConfigStore, UnreadableRowWarning
from autotune.kernels import add

OTHER = {"BLOCK_SIZE": 128, "num_warps": 1, "num_stages": 1}


@pytest.mark.parametrize(
    "column, value", [("created_at", "last tuesday"), ("time_ms", "fast"), ("verified_at", "2026-13-45 99:99:99")]
)
def test_the_other_rows_of_the_kernel_are_served_and_shown(column, value, tmp_path, monkeypatch):
    path = database_files.valid(
        tmp_path / "user.sqlite",
        database_files.row(),
        database_files.row(bucket="n=1024", config_json=json.dumps(OTHER)),
    )
    with database_files.sqlite(path) as conn:
        conn.execute(f"UPDATE best_configs SET {column} = ? WHERE bucket = 'n=1024'", (value,))
    monkeypatch.setenv("AUTOTUNE_DB", str(path))
    runtime.clear_cache()
    try:
        with pytest.warns(UnreadableRowWarning, match=f"row 2 \\(vector_add fp32 n=1024\\): {column}"):
            with runtime.record_launches() as launches:
                add(torch.ones(5000), torch.ones(5000))  # bucket n=8192, the readable row
                add(torch.ones(1000), torch.ones(1000))  # bucket n=1024: the nearest readable row
    finally:
        runtime.clear_cache()
    assert [config for _, config in launches] == [database_files.STORED, database_files.STORED]

    with pytest.warns(UnreadableRowWarning):
        with ConfigStore(str(path), readonly=True) as store:
            assert [r.bucket for r in store.best_rows(kernel="vector_add")] == ["n=8192"]
    with pytest.warns(UnreadableRowWarning):
        result = CliRunner().invoke(main, ["query", "vector_add", "--db", str(path), "--format", "json"])
    assert result.exit_code == 0 and [r["bucket"] for r in json.loads(result.output[result.output.index("[") :])] == [
        "n=8192"
    ]
