"""`autotune gpu` gives every field a value: on a CPU it says there is no CUDA device and names the interpreter."""

import re

import pytest
from click.testing import CliRunner

from autotune import gpu
from autotune.cli import main


def _rows(text: str) -> dict[str, str]:
    lines = text.strip().splitlines()[2:]  # under the header and its rule
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in lines)


@pytest.mark.skipif(not gpu.interpreter_active(), reason="a CPU's rows")
def test_on_a_cpu_every_row_says_something():
    result = CliRunner().invoke(main, ["gpu"])
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout)
    assert len(rows) == 7 and all(rows.values()), result.stdout
    assert rows["name"] == gpu.CPU_INTERPRETER
    assert rows["compute capability"].startswith("none: no CUDA device (Triton interpreter)")
    assert rows["SMs"].startswith("none: no CUDA device")
    assert float(rows["memory GiB"].split()[0]) > 0  # the host's: the interpreter's tensors live there
    assert rows["peak GB/s (datasheet)"].startswith("n/a: interpreter timings are not GPU timings")


def test_a_gpu_describes_itself_in_plain_values():
    info = gpu.GPUInfo("H100", "NVIDIA H100 80GB HBM3", (9, 0), 132, 80 * 2**30, 3350, {"bf16": 989, "fp32": 67})
    assert dict(info.describe()) == {
        "name": "H100",
        "device": "NVIDIA H100 80GB HBM3",
        "compute capability": "9.0",
        "SMs": "132",
        "memory GiB": "80.0",
        "peak GB/s (datasheet)": "3350",
        "peak TFLOP/s (datasheet)": "bf16 989, fp32 67",
    }
    unknown = gpu.GPUInfo("RTX-9000", "NVIDIA RTX 9000", (12, 0), 200, None, None, {})
    assert all(value for _, value in unknown.describe())
