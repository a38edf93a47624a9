"""A seed names the problems verify checks, wherever it runs: a search compiles ahead, in its main process, what
its evaluation worker will draw, and `autotune db verify --seed` reproduces a failure on another machine.
Hypothesis also draws constants out of the source of whatever "local" modules a process has imported (on the
GPU machine, every package installed with `pip --target`), which made the draws depend on the process."""

import importlib
import json
import subprocess
import sys

import pytest
import torch

from autotune.gate.repeatable_draws import local_constants_controlled
from autotune.gate.verify import draw_problems
from autotune.kernels.fused_softmax.softmax import SPEC as SOFTMAX
from autotune.kernels.gemm.matmul import MATMUL

pytestmark = pytest.mark.skipif(
    not local_constants_controlled(), reason="this Hypothesis draws no constants from local modules"
)

SIZES = tuple(range(100, 70000, 137))  # Hypothesis takes up to 1024 constants from a module


def local_constants():
    from hypothesis.internal.conjecture import providers

    return providers._get_local_constants()


def draws(spec, seed):
    return draw_problems(spec, spec.space.default, torch.float16, examples=20, seed=seed)


def test_importing_a_module_full_of_sizes_does_not_change_what_a_seed_draws(tmp_path, monkeypatch):
    (tmp_path / "many_sizes.py").write_text(f"SIZES = {SIZES!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = {(spec.name, seed): draws(spec, seed) for spec in (SOFTMAX, MATMUL) for seed in range(4)}

    importlib.import_module("many_sizes")

    assert SIZES[-1] in local_constants().integers  # Hypothesis took the module's sizes up
    after = {(spec.name, seed): draws(spec, seed) for spec in (SOFTMAX, MATMUL) for seed in range(4)}
    assert after == before


def test_a_fresh_process_draws_what_this_one_draws(tmp_path, monkeypatch):
    # This process has imported the test modules, pytest and a module of sizes; the fresh one autotune's verify
    # alone, as an evaluation worker starts.
    (tmp_path / "more_sizes.py").write_text(f"SIZES = {tuple(s + 1 for s in SIZES)!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("more_sizes")

    here = [draws(spec, seed) for spec in (SOFTMAX, MATMUL) for seed in range(4)]
    code = (
        "import json, torch\n"
        "from autotune.kernels.fused_softmax.softmax import SPEC as SOFTMAX\n"
        "from autotune.kernels.gemm.matmul import MATMUL\n"
        "from autotune.gate.verify import draw_problems\n"
        "print(json.dumps([draw_problems(s, s.space.default, torch.float16, examples=20, seed=seed)\n"
        "                  for s in (SOFTMAX, MATMUL) for seed in range(4)]))\n"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert json.loads(fresh.stdout) == json.loads(json.dumps(here))
