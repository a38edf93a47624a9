"""The probe behind docs/kernels.md's bound on the GQA decode step (benchmarks/decode_read_bound.py) times a kernel
that reads what it says: each program's sum is the sum of its split's K and V rows, and the committed result renders
from its JSON as committed. Run as users run it, under the Triton interpreter."""

import pathlib
import subprocess
import sys

RESULT = pathlib.Path("benchmarks/results/H100/decode-read-bound")


def test_the_read_kernel_sums_each_splits_keys():
    done = subprocess.run(
        [sys.executable, "benchmarks/decode_read_bound.py", "--check"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")


def test_the_committed_page_is_its_json_rendered(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(RESULT.with_suffix(".json").read_text())
    done = subprocess.run(
        [sys.executable, "benchmarks/decode_read_bound.py", "--render", str(run)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "run.md").read_text() == RESULT.with_suffix(".md").read_text()
