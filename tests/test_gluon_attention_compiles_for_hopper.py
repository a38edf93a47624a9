"""The Gluon attention forward (autotune/kernels/attention/hopper_forward.py) compiles for Hopper (sm_90a) with the
GPU machine's Triton, within the H100's shared memory, without spilling, with the register split it plans; where
it cannot run (this CPU, a Triton without Gluon) it says why instead of failing, and importing it never fails.

The compile cases run tests/hopper_attention_compile.py in a subprocess with the Triton at AUTOTUNE_GPU_TRITON
(`pip install -q --no-deps --target DIR triton==3.6.0`; .ci/run makes one); unset, they are skipped. Whether
the kernel computes the right numbers needs the GPU: benchmarks/hopper_attention_probe.py."""

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from gpu_triton import GPU_TRITON_VERSION, run_compile_script

from autotune.kernels.attention import hopper_forward

ROOT = pathlib.Path(__file__).resolve().parents[1]
H100_SHARED_MEMORY = 232448  # what one program may opt into, as Triton's driver reports it
COMPILE_TIMEOUT_S = 600


def test_it_refuses_the_cpu_with_a_reason():
    q = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)
    reason = hopper_forward.supported(q, q[:, :1], q[:, :1])
    assert reason == "q is on the cpu: the kernel needs a Hopper GPU (sm_90)"
    with pytest.raises(ValueError, match="hopper_attention_forward: q is on the cpu"):
        hopper_forward.hopper_attention_forward(q, q, q)


def test_it_imports_without_gluon_and_says_so():
    # A Triton without Gluon (older, or another build): the import guard keeps the module importable.
    script = """
import importlib.abc, sys
class NoGluon(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith("triton.experimental"):
            raise ImportError(f"no module named {name}")
sys.meta_path.insert(0, NoGluon())
import torch
from autotune.kernels.attention import hopper_forward
q = torch.zeros(1, 1, 4, 64, dtype=torch.bfloat16)
print(hopper_forward.supported(q, q, q))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "has no Gluon for Hopper" in run.stdout


@pytest.mark.parametrize(
    "change, head_dim, reason",
    [
        ({"BLOCK_N": 32}, 128, "config['BLOCK_N'] must be one of (64, 128, 256), got 32"),
        ({"NUM_CONSUMERS": 1}, 128, "PINGPONG takes turns between two consumers"),
        ({"CONSUMER_REGISTERS": 232}, 128, "leaves the first consumer 224 registers; choose one of [192, 216, 240]"),
        ({"BLOCK_N": 256, "NUM_STAGES": 2}, 128, "the tiles take 295936 bytes of shared memory"),
        # ptxas: "Insufficient registers (128) ... register target of 154 or higher", at both head dims
        (
            {"BLOCK_N": 256, "NUM_STAGES": 1, "NUM_CONSUMERS": 1, "PINGPONG": False, "CONSUMER_REGISTERS": 232},
            64,
            "BLOCK_N=256 with one consumer: its S tile needs more registers than the 128 a thread is launched with",
        ),
        (
            {"BLOCK_N": 256, "NUM_STAGES": 1, "NUM_CONSUMERS": 1, "PINGPONG": False, "CONSUMER_REGISTERS": 232},
            128,
            "BLOCK_N=256 with one consumer",
        ),
    ],
)
def test_a_config_that_cannot_run_is_refused_by_name(change, head_dim, reason):
    assert reason in hopper_forward.config_problem({**hopper_forward.DEFAULT_CONFIG, **change}, head_dim)


def test_the_default_config_runs_at_every_head_dim():
    for d in hopper_forward.HEAD_DIMS:
        assert hopper_forward.config_problem(hopper_forward.DEFAULT_CONFIG, d) is None


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[dict, list[dict]]:
    """hopper_attention_compile.py's header line and its line per case, compiled from a fresh kernel cache."""
    cache = tmp_path_factory.mktemp("triton-cache")
    header, lines = run_compile_script("hopper_attention_compile.py", "the Gluon attention compiles for the GPU", cache)
    for line in lines:  # the report: pytest -s shows it
        print(
            f"{line['name']}: shared {line.get('shared')} B, registers {line.get('registers')}, spills "
            f"{line.get('spill_stores')}/{line.get('spill_loads')} B, setmaxnreg {line.get('setmaxnreg')}"
        )
    return header, lines


def test_every_case_compiles_for_sm90_with_the_gpu_triton(compiled):
    header, lines = compiled
    assert header["triton"] == GPU_TRITON_VERSION, f"compiled with Triton {header['triton']} from {header['path']}"
    failures = [f"{line['name']}:\n{line['error']}" for line in lines if not line["ok"]]
    assert not failures, f"{len(failures)} of {len(lines)} do not compile for sm_90a:\n\n" + "\n\n".join(failures)
    assert {line["head_dim"] for line in lines} == set(hopper_forward.HEAD_DIMS)
    assert {line["causal"] for line in lines} == {False, True}
    assert {line["config"]["NUM_CONSUMERS"] for line in lines} == {1, 2}


def test_shared_memory_fits_the_h100_and_the_estimate_bounds_it(compiled):
    _, lines = compiled
    for line in lines:
        estimate = hopper_forward.shared_memory_bytes(line["config"], line["head_dim"])
        assert estimate - hopper_forward.BARRIER_BYTES <= line["shared"] <= min(estimate, H100_SHARED_MEMORY), line


def test_nothing_spills_and_the_partitions_get_the_registers_planned(compiled):
    _, lines = compiled
    for line in lines:
        config = line["config"]
        maxnreg, first = hopper_forward.register_split(config["NUM_CONSUMERS"], config["CONSUMER_REGISTERS"])
        assert (line["spill_stores"], line["spill_loads"]) == (0, 0), line
        assert line["registers"] == maxnreg, line
        assert {first, config["CONSUMER_REGISTERS"], hopper_forward.LOADER_REGISTERS} <= set(line["setmaxnreg"]), line
