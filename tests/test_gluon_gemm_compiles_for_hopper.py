"""The Gluon Hopper GEMM (autotune/kernels/gemm/hopper_gemm.py) compiles for sm_90a with the GPU machine's Triton, in
every operand layout, both schedules and the gated epilogue, within the H100's shared memory, without spilling,
with the register split it plans and its wgmmas left asynchronous; where it cannot run (this CPU, a Triton
without Gluon) it says why instead of failing, and a config that cannot run is refused by name.

The compile cases run tests/hopper_gemm_compile.py in a subprocess with the Triton at AUTOTUNE_GPU_TRITON
(`pip install -q --no-deps --target DIR triton==3.6.0`; .ci/run makes one); unset, they are skipped. Whether
the kernel computes the right numbers, and how fast, needs the GPU: benchmarks/hopper_gemm_probe.py."""

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from gpu_triton import GPU_TRITON_VERSION, run_compile_script

from autotune.kernels.gemm import hopper_gemm
from autotune.search_spaces import hopper_gemm_config as cfg

ROOT = pathlib.Path(__file__).resolve().parents[1]
H100_SHARED_MEMORY = 232448  # what one program may opt into, as Triton's driver reports it
COMPILE_TIMEOUT_S = 600


def test_it_refuses_the_cpu_with_a_reason():
    a = torch.zeros(64, 32, dtype=torch.bfloat16)
    assert hopper_gemm.supported(a, a.t()) == "a is on the cpu: the kernel needs a Hopper GPU (sm_90)"
    with pytest.raises(ValueError, match="hopper_matmul: a is on the cpu"):
        hopper_gemm.hopper_matmul(a, a.t())
    assert hopper_gemm.gated_supported(a, a, a) == "x is on the cpu: the kernel needs a Hopper GPU (sm_90)"
    with pytest.raises(ValueError, match="hopper_gated: x is on the cpu"):
        hopper_gemm.hopper_gated(a, a, a)


def test_it_imports_without_gluon_and_says_so():
    script = """
import importlib.abc, sys
class NoGluon(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith("triton.experimental"):
            raise ImportError(f"no module named {name}")
sys.meta_path.insert(0, NoGluon())
import torch
from autotune.kernels.gemm import hopper_gemm
a = torch.zeros(8, 8, dtype=torch.bfloat16)
print(hopper_gemm.supported(a, a))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "has no Gluon for Hopper" in run.stdout


@pytest.mark.parametrize(
    "change, gated, reason",
    [
        ({"SCHEDULE": "pingpong", "NUM_CONSUMERS": 1, "CONSUMER_REGISTERS": 232}, False, "needs NUM_CONSUMERS=2"),
        ({"CONSUMER_REGISTERS": 232}, False, "leaves the first consumer 224 registers; choose one of [240]"),
        ({"BLOCK_M": 128}, False, "the accumulator takes 256 registers a thread"),
        ({}, True, "the gate's and the up projection's accumulators take 256 registers a thread"),
        ({"NUM_STAGES": 4}, False, "the tiles take 263168 bytes of shared memory"),
        ({"BLOCK_K": 16}, False, "config['BLOCK_K'] must be one of (32, 64, 128), got 16"),
    ],
)
def test_a_config_that_cannot_run_is_refused_by_name(change, gated, reason):
    assert reason in cfg.config_problem({**cfg.DEFAULT_CONFIG, **change}, gated)


def test_the_default_configs_can_run():
    assert cfg.config_problem(cfg.DEFAULT_CONFIG) is None
    assert cfg.config_problem(cfg.DEFAULT_GATED_CONFIG, gated=True) is None


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[dict, list[dict]]:
    """hopper_gemm_compile.py's header line and its line per case, compiled from a fresh kernel cache."""
    cache = tmp_path_factory.mktemp("triton-cache")
    header, lines = run_compile_script("hopper_gemm_compile.py", "the Gluon GEMM compiles for the GPU", cache)
    for line in lines:  # the report: pytest -s shows it
        print(
            f"{line['name']}: shared {line.get('shared')} B, registers {line.get('registers')}, spills "
            f"{line.get('spill_stores')}/{line.get('spill_loads')} B, setmaxnreg {line.get('setmaxnreg')}, "
            f"wgmma serialized {line.get('wgmma_serialized')}"
        )
    return header, lines


def test_every_case_compiles_for_sm90_with_the_gpu_triton(compiled):
    header, lines = compiled
    assert header["triton"] == GPU_TRITON_VERSION, f"compiled with Triton {header['triton']} from {header['path']}"
    failures = [f"{line['name']}:\n{line['error']}" for line in lines if not line["ok"]]
    assert not failures, f"{len(failures)} of {len(lines)} do not compile for sm_90a:\n\n" + "\n\n".join(failures)
    assert {line["layout"][:2] for line in lines if not line["gated"]} == {"nt", "nn", "tn", "tt"}
    assert {line["config"]["SCHEDULE"] for line in lines if line["gated"]} == {"cooperative", "pingpong"}
    assert {line["config"]["NUM_CONSUMERS"] for line in lines} == {1, 2}


def test_shared_memory_fits_the_h100_and_the_estimate_bounds_it(compiled):
    _, lines = compiled
    for line in lines:
        estimate = cfg.shared_memory_bytes(line["config"], line["gated"])
        assert estimate - cfg.BARRIER_BYTES <= line["shared"] <= min(estimate, H100_SHARED_MEMORY), line


def test_nothing_spills_the_wgmmas_stay_asynchronous_and_the_partitions_get_the_registers_planned(compiled):
    _, lines = compiled
    for line in lines:
        config = line["config"]
        maxnreg, first = cfg.register_split(config["NUM_CONSUMERS"], config["CONSUMER_REGISTERS"])
        assert (line["spill_stores"], line["spill_loads"]) == (0, 0), line
        assert not line["wgmma_serialized"], line
        assert line["registers"] == maxnreg, line
        assert {first, config["CONSUMER_REGISTERS"], cfg.LOADER_REGISTERS} <= set(line["setmaxnreg"]), line
