"""The caches of problems' tensors hold at most their byte budget: a `db verify` of a large bucket (float64
references of its edge problems) once filled an H100, with compile workers holding 3 GiB each."""

from __future__ import annotations

import json

import cachetools
import torch

from autotune.engine import precompile
from autotune.gate.verify import ReferenceCache, tensor_bytes
from autotune.kernels.vector_add.add import SPEC


def problem(n: int) -> dict:
    return {"shape": [n], "layout": "contiguous", "magnitude": 1.0}


def test_tensor_bytes_adds_up_the_tensors_in_nested_containers():
    a, b = torch.zeros(10), torch.zeros(3, dtype=torch.float64)
    assert tensor_bytes({"a": a, "rest": (b, [a], 7, None)}) == 40 + 24 + 40
    assert tensor_bytes("not a tensor") == 0


def test_reference_cache_keeps_the_most_recent_problems_within_its_bytes():
    one = tensor_bytes(ReferenceCache().get(SPEC, problem(4096), torch.float32, 0))
    cache = ReferenceCache(max_bytes=int(2.5 * one))
    first = cache.get(SPEC, problem(4096), torch.float32, 0)
    assert cache.get(SPEC, problem(4096), torch.float32, 0)[2] is first[2]  # kept, not computed again
    for seed in (1, 2, 3):
        cache.get(SPEC, problem(4096), torch.float32, seed)
    assert len(cache) == 2 and cache.held_bytes <= 2.5 * one
    assert cache.get(SPEC, problem(4096), torch.float32, 0)[2] is not first[2]  # the oldest went first


def test_a_problem_larger_than_the_whole_cache_is_served_but_not_kept():
    cache = ReferenceCache(max_bytes=10_000)
    inputs, base, ref = cache.get(SPEC, problem(100_000), torch.float32, 0)
    assert ref.shape == (100_000,) and len(cache) == 0 and cache.held_bytes == 0


def test_a_compile_worker_keeps_inputs_within_its_bytes(monkeypatch):
    # In this process under the interpreter the "compile" runs the kernel; the cache is the worker's own.
    cache = cachetools.LRUCache(200_000, getsizeof=tensor_bytes)
    monkeypatch.setattr(precompile, "_inputs", cache)
    config = json.dumps(SPEC.space.default)
    problems = [problem(n) for n in (1000, 2000, 3000, 4000, 1_000_000)]
    assert precompile._compile(SPEC.name, json.dumps(problems), "fp32", config) is None
    assert 0 < cache.currsize <= 200_000 and len(cache) < len(problems)
    assert not any('"shape": [1000000]' in key[1] for key in cache)  # 12 MB of inputs: used, not kept
