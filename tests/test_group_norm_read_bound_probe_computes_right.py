"""The probe behind docs/kernels.md's bound on a one-read group_norm (benchmarks/group_norm_read_bound.py) times
kernels that compute what it says: its copies copy, its silu variants normalize, its one-read group_norm matches
float64. Run as users run it, under the Triton interpreter."""

import subprocess
import sys


def test_the_probes_kernels_compute_what_it_says():
    done = subprocess.run(
        [sys.executable, "benchmarks/group_norm_read_bound.py", "--check"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")
