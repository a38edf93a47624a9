"""The Gluon attention backward (autotune/kernels/attention/hopper_backward.py) compiles for Hopper (sm_90a) with the
GPU machine's Triton, each kernel within the H100's shared memory and its own estimate, with the register split it
plans and its asynchronous wgmmas not serialized by ptxas; where it cannot run (this CPU, a Triton without Gluon)
it says why instead of failing, and importing it never fails.

The compile cases run tests/hopper_attention_backward_compile.py in a subprocess with the Triton at
AUTOTUNE_GPU_TRITON (`pip install -q --no-deps --target DIR triton==3.6.0`; .ci/run makes one); unset, they are
skipped. `pytest -s` prints each case's registers, spills and shared memory. Whether the kernels compute the right
numbers needs the GPU: benchmarks/hopper_attention_backward_probe.py."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from gpu_triton import GPU_TRITON_VERSION, run_compile_script

from autotune.kernels.attention import hopper_backward
from autotune.search_spaces.flash_attn_gluon import LOADER_REGISTERS, register_split

ROOT = pathlib.Path(__file__).resolve().parents[1]
H100_SHARED_MEMORY = 232448  # what one program may opt into, as Triton's driver reports it
COMPILE_TIMEOUT_S = 900


def test_it_refuses_the_cpu_with_a_reason():
    q = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)
    kv = q[:, :1]
    assert hopper_backward.supported(q, kv, kv) == "q is on the cpu: the kernel needs a Hopper GPU (sm_90)"
    lse = torch.zeros(1, 2, 8)
    with pytest.raises(ValueError, match="hopper_attention_backward: q is on the cpu"):
        hopper_backward.hopper_attention_backward(q, q, kv, kv, q, lse)


def test_it_imports_without_gluon_and_says_so():
    # A Triton without Gluon (older, or another build): the import guards keep the modules importable.
    script = """
import importlib.abc, sys
class NoGluon(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith("triton.experimental"):
            raise ImportError(f"no module named {name}")
sys.meta_path.insert(0, NoGluon())
import torch
from autotune.kernels.attention import hopper_backward
q = torch.zeros(1, 1, 4, 64, dtype=torch.bfloat16)
print(hopper_backward.supported(q, q, q))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "has no Gluon for Hopper" in run.stdout


@pytest.mark.parametrize(
    "change, head_dim, reason",
    [
        ({"BLOCK_N": 128}, 128, "config['BLOCK_N'] must be one of (64,), got 128"),
        ({"DQ": "atomics"}, 128, "config['DQ'] must be one of ('atomic', 'combined', 'separate'), got 'atomics'"),
        ({"DQ": "combined", "NUM_CONSUMERS": 1, "CONSUMER_REGISTERS": 232}, 128, "it needs NUM_CONSUMERS=2"),
        ({"SPLIT_DS": 1}, 128, "config['SPLIT_DS'] must be one of (False, True), got 1"),
        ({"DQ": "combined", "BLOCK_M": 128}, 64, "its dQ failed `db verify` on an H100"),
        ({"PINGPONG": True, "NUM_CONSUMERS": 1, "CONSUMER_REGISTERS": 232}, 128, "PINGPONG takes turns between two"),
        ({}, 96, "head dim 96 is not one of (64, 128)"),
        ({"CONSUMER_REGISTERS": 232}, 128, "leaves the first consumer 224 registers; choose one of [192, 216, 240]"),
        ({"NUM_STAGES": 3}, 128, "the tiles take 263168 bytes of shared memory"),
        ({"SPLIT_DS": True}, 128, "the tiles take 246784 bytes of shared memory"),
    ],
)
def test_a_config_that_cannot_run_is_refused_by_name(change, head_dim, reason):
    assert reason in hopper_backward.config_problem({**hopper_backward.DEFAULT_CONFIG, **change}, head_dim)


def test_the_default_config_runs_at_every_head_dim_with_each_dq():
    for d in (64, 128):
        for dq in ("atomic", "combined", "separate"):
            assert hopper_backward.config_problem({**hopper_backward.DEFAULT_CONFIG, "DQ": dq}, d) is None
    # one float32 dQ tile a program instead of one a consumer: room for a third stage at head dim 128
    combined = {**hopper_backward.DEFAULT_CONFIG, "DQ": "combined", "NUM_STAGES": 3}
    assert hopper_backward.config_problem(combined, 128) is None


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[dict, list[dict]]:
    """hopper_attention_backward_compile.py's header line and its line per case, compiled from a fresh cache."""
    cache = tmp_path_factory.mktemp("triton-cache")
    what = "the Gluon attention backward compiles for the GPU"
    header, lines = run_compile_script("hopper_attention_backward_compile.py", what, cache)
    for line in lines:  # the report: pytest -s shows it
        for which, k in line.get("kernels", {}).items():
            print(
                f"{line['name']} {which}: shared {k['shared']} B, registers {k['registers']}, spills "
                f"{k['spill_stores']}/{k['spill_loads']} B, setmaxnreg {k['setmaxnreg']}"
            )
    return header, lines


def test_every_case_compiles_for_sm90_with_the_gpu_triton(compiled):
    header, lines = compiled
    assert header["triton"] == GPU_TRITON_VERSION, f"compiled with Triton {header['triton']} from {header['path']}"
    failures = [f"{line['name']}:\n{line['error']}" for line in lines if not line["ok"]]
    assert not failures, f"{len(failures)} of {len(lines)} do not compile for sm_90a:\n\n" + "\n\n".join(failures)
    assert {line["head_dim"] for line in lines} == {64, 128}
    assert {line["causal"] for line in lines} == {False, True}
    assert {line["config"]["DQ"] for line in lines} == {"atomic", "combined", "separate"}
    # the two consumers taking turns (PINGPONG), with each dQ, causal (the second's skipped blocks) or not
    turns = [line for line in lines if line["config"]["PINGPONG"]]
    assert {(line["config"]["DQ"], line["causal"]) for line in turns} >= {
        ("atomic", True),
        ("combined", False),
        ("combined", True),
        ("separate", False),
        ("separate", True),
    }
    assert {line["config"]["DELTA"] for line in lines} == {"output", "recomputed"}
    for line in lines:  # the dQ kernel runs where dQ has a pass of its own; its delta pass where delta is recomputed
        config = line["config"]
        expected = {"dkdv"} | ({"dq"} if config["DQ"] == "separate" else set())
        expected |= {"delta"} if config["DELTA"] == "recomputed" else set()
        assert set(line["kernels"]) == expected, line


def test_shared_memory_fits_the_h100_and_the_estimate_bounds_it(compiled):
    _, lines = compiled
    for line in lines:
        estimate = hopper_backward.shared_memory_bytes(line["config"], line["head_dim"])
        kernels = line["kernels"]
        assert estimate - hopper_backward.BARRIER_BYTES <= kernels["dkdv"]["shared"] <= estimate, line
        assert all(k["shared"] <= min(estimate, H100_SHARED_MEMORY) for k in kernels.values()), line


def test_the_partitions_get_the_registers_planned_and_the_wgmmas_stay_asynchronous(compiled):
    _, lines = compiled
    for line in lines:
        config = line["config"]
        maxnreg, first = register_split(config["NUM_CONSUMERS"], config["CONSUMER_REGISTERS"])
        for which, kernel in line["kernels"].items():
            assert kernel["registers"] == maxnreg, (line["name"], which)
            assert {first, config["CONSUMER_REGISTERS"], LOADER_REGISTERS} <= set(kernel["setmaxnreg"]), line
            # ptxas serializes them where an accumulator in flight is read before its wait (a missed wait)
            assert not kernel["wgmma_serialized"], (line["name"], which)


def test_64_query_blocks_at_head_dim_64_and_the_dq_pass_do_not_spill(compiled):
    # At head dim 128, or 128-query blocks, the dK/dV kernel spills a few scalars, mostly around its masked blocks
    # (reported above: pytest -s).
    _, lines = compiled
    for line in lines:
        for which, kernel in line["kernels"].items():
            if (line["head_dim"] == 64 and line["config"]["BLOCK_M"] == 64) or which == "dq":
                assert (kernel["spill_stores"], kernel["spill_loads"]) == (0, 0), (line["name"], which)


def test_taking_turns_spills_less_than_running_independently(compiled):
    # With the two consumers taking turns (PINGPONG) the dK/dV kernel spills less than the same config without it
    # at head dim 128 without causal masking (each dQ), nothing at head dim 64. At head dim 128 with causal
    # masking the spills move (fewer reloads, more stores with dQ separate): reported above (pytest -s), not pinned.
    _, lines = compiled
    by_config = {(line["head_dim"], line["causal"], line["dtype"], json.dumps(line["config"], sort_keys=True)): line
                 for line in lines}  # fmt: skip
    compared = 0
    for line in lines:
        config = line["config"]
        twin = by_config.get(
            (line["head_dim"], line["causal"], line["dtype"], json.dumps({**config, "PINGPONG": False}, sort_keys=True))
        )
        if not config["PINGPONG"] or twin is None or (line["causal"] and line["head_dim"] == 128):
            continue
        compared += 1
        spilled = line["kernels"]["dkdv"]["spill_stores"] + line["kernels"]["dkdv"]["spill_loads"]
        alone = twin["kernels"]["dkdv"]["spill_stores"] + twin["kernels"]["dkdv"]["spill_loads"]
        if line["head_dim"] == 128:  # strictly: the same kernel (PINGPONG ignored) would spill the same
            assert spilled < alone, (line["name"], spilled, twin["name"], alone)
        else:
            assert spilled == alone == 0, (line["name"], spilled, twin["name"], alone)
    assert compared >= 4
