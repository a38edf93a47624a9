"""benchmarks/compare.py (which the GPU session scripts run) on the measurement `autotune bench` uses: its
flags, its extra implementations and its files."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_compare_script_writes_every_implementation_with_its_flags(tmp_path):
    prefix = tmp_path / "compare-cpu"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "compare.py"),
            "--kernel",
            "vector_add",
            "--dtype",
            "fp32",
            "--shape",
            "vector_add=3000",
            "--out",
            str(prefix),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    saved = json.loads(prefix.with_name("compare-cpu.json").read_text())
    assert saved["copy_bandwidth_gbs"] is None and saved["interpreter"] is True  # no GPU copy to measure here
    records = {r["impl"]: r for r in saved["records"]}
    assert set(records) == {"tuned", "tuned-launch", "default", "torch", "compile"}  # vector_add has no vendor call
    assert all(r["median_ms"] > 0 and r["shape"] == "3000" and r["bucket"] == "n=4096" for r in records.values())
    table = prefix.with_name("compare-cpu.md").read_text()
    assert table in run.stdout and "launch-only vs best" in table and "vs compile" in table
