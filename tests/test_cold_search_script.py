"""benchmarks/cold_search.py: a search that reads no database's rows, timed against the best known row of its bucket
in the same process."""

import json
import os
import subprocess
import sys

from stored_rows import store_best

import autotune


def test_a_cold_search_ignores_stored_rows_and_is_timed_against_the_best_known(tmp_path, monkeypatch):
    spec = autotune.get("vector_add")
    problem = spec.parse_shape("5000")
    known = {"BLOCK_SIZE": 128, "num_warps": 1, "num_stages": 1}  # far from what a search of 5000 elements picks
    db = tmp_path / "user.sqlite"
    store_best(db, spec, spec.bucket(problem), known, problem=problem)
    out = tmp_path / "cold"
    subprocess.run(
        [
            sys.executable,
            "benchmarks/cold_search.py",
            "--kernel",
            "vector_add",
            "--shape",
            "5000",
            "--dtype",
            "fp32",
            "--trials",
            "3",
            "--examples",
            "2",
            "--final-examples",
            "2",
            "--rounds",
            "2",
            "--out",
            str(out),
        ],
        check=True,
        env={**os.environ, "AUTOTUNE_DB": str(db)},
    )
    record = json.loads((tmp_path / "cold.json").read_text())
    assert record["known_config"] == known and record["known_database"].endswith("user.sqlite")
    assert record["evaluations"] == 3 and record["ratio"] > 0
    # When its winner was first tried: after the start, before the search ended.
    assert 0 < record["winner_found_s"] <= record["wall_s"]
    assert "known / cold" in (tmp_path / "cold.md").read_text()
