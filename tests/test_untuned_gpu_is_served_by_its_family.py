"""A GPU no database holds rows for in a call's dtype is served the rows of the nearest GPU of its architecture family
tuned in that dtype (an H200 the H100's, an A10 the A100's), each config checked against the device's limits first:
one that does not fit is dropped, and the GPU whose rows serve is said once per kernel and dtype."""

import json
import warnings

import torch
import user_kernels

from autotune import device_limits, gpu, runtime
from autotune.db import BestRow, ConfigStore, shipped_path
from autotune.runtime import fallback, registry


def _fake_device(monkeypatch, name: str, cc: tuple[int, int]) -> None:
    """This machine's device named `name` (the kernels still run under the interpreter here)."""
    info = gpu.GPUInfo(name, f"NVIDIA {name}", cc, device_limits.MODELS[name].sms, None, None, {})
    monkeypatch.setattr(gpu, "current_gpu", lambda: info)
    monkeypatch.setattr(fallback, "_warned", set())
    runtime.clear_cache()


def _store(path, spec, gpu_name, bucket, config, dtype="fp32"):
    with ConfigStore(str(path)) as store:
        store.record_best(
            BestRow(
                kernel=spec.name,
                source_hash=spec.source_hash,
                gpu=gpu_name,
                device_name=gpu_name,
                dtype=dtype,
                bucket=bucket,
                config_json=json.dumps(config),
                problem_json=json.dumps({"sizes": {"n": 1000}, "magnitude": 1.0}),
                time_ms=1.0,
                examples_verified=1,
                triton_version="x",
                torch_version="y",
            )
        )
    runtime.clear_cache()


def _calls(kernel, sizes):
    with warnings.catch_warnings(record=True) as caught, runtime.record_launches() as launched:
        warnings.simplefilter("always")  # the once-per-process rule is the runtime's, and is what is tested
        for n in sizes:
            x = torch.randn(n)
            torch.testing.assert_close(kernel(x, x), 3 * x)
            runtime.clear_cache()  # every call reads the databases again
    said = [str(w.message) for w in caught if issubclass(w.category, fallback.ServedByAnotherGPUWarning)]
    return [c for _, c in launched], said


def test_an_h200_is_served_the_h100s_rows(user_db, monkeypatch):
    h100 = {"BLOCK": 1024, "num_warps": 4, "num_stages": 2}
    _store(user_db, user_kernels.axpy.spec, "H100", "n=1024", h100)
    _store(user_db, user_kernels.axpy.spec, "T4", "n=1024", {"BLOCK": 128, "num_warps": 2, "num_stages": 1})
    _fake_device(monkeypatch, "H200", (9, 0))
    launched, said = _calls(user_kernels.axpy, [1000, 900, 1000])
    assert launched == [h100, h100, h100]
    assert len(said) == 1 and "axpy on H200" in said[0] and "serving the H100's" in said[0] and "hopper" in said[0]


def test_a_gpu_tuned_in_another_dtype_only_is_served_the_family_rows_of_the_calls_dtype(user_db, monkeypatch):
    h100 = {"BLOCK": 1024, "num_warps": 4, "num_stages": 2}
    _store(user_db, user_kernels.axpy.spec, "H100", "n=1024", h100)
    _store(user_db, user_kernels.axpy.spec, "H200", "n=1024", {"BLOCK": 64, "num_warps": 1, "num_stages": 1}, "fp16")
    _fake_device(monkeypatch, "H200", (9, 0))
    launched, said = _calls(user_kernels.axpy, [1000, 1000])  # fp32 calls: the H200 has fp16 rows only
    assert launched == [h100, h100]  # not the default config
    assert len(said) == 1 and "no tuned fp32 configs for axpy on H200" in said[0] and "serving the H100's" in said[0]

    _store(user_db, user_kernels.axpy.spec, "H200", "n=4096", own := {"BLOCK": 256, "num_warps": 2, "num_stages": 1})
    launched, said = _calls(user_kernels.axpy, [1000])  # once the H200 has an fp32 row, its own rows serve
    assert launched == [own] and said == []


def test_a_config_too_large_for_a_smaller_device_is_dropped_with_one_warning(user_db, monkeypatch):
    spec = user_kernels.staged_axpy.spec
    too_large = {"BLOCK": 1024, "num_warps": 4, "num_stages": 1}  # 128 KiB staged: fits the A100, not the A10
    fits = {"BLOCK": 128, "num_warps": 4, "num_stages": 2}
    _store(user_db, spec, "A100", "n=1024", too_large)
    _store(user_db, spec, "A100", "n=8192", fits)
    _fake_device(monkeypatch, "A10", (8, 6))
    launched, said = _calls(user_kernels.staged_axpy, [1000, 1000])
    assert launched == [fits, fits]  # n=1024's own row dropped: the nearest bucket that fits serves
    assert len(said) == 1
    assert "A100's (1 row(s))" in said[0] and "dropped 1" in said[0] and "101376" in said[0]

    _fake_device(monkeypatch, "A100", (8, 0))  # the GPU the rows were tuned on serves them all, unwarned
    launched, said = _calls(user_kernels.staged_axpy, [1000])
    assert launched == [too_large] and said == []


def test_no_row_of_another_family_is_served(user_db, monkeypatch):
    _store(user_db, user_kernels.axpy.spec, "A100", "n=1024", {"BLOCK": 1024, "num_warps": 4, "num_stages": 2})
    _fake_device(monkeypatch, "H200", (9, 0))
    launched, said = _calls(user_kernels.axpy, [1000])
    assert launched == [user_kernels.axpy.spec.space.default] and said == []


def test_the_nearest_tuned_gpu_is_of_the_same_family_and_most_alike():
    limits = device_limits.MODELS
    assert fallback.nearest(limits["H20"], ["A100", "H200", "H100"]).name == "H100"
    assert fallback.nearest(limits["A10"], ["A100", "H100", "L4"]).name == "A100"
    assert fallback.nearest(limits["A10"], ["A40", "A100"]).name == "A40"  # same compute capability first
    assert fallback.nearest(limits["L4"], ["A100", "H100"]) is None


def test_shipped_kernels_state_what_their_configs_need():
    with ConfigStore(str(shipped_path()), readonly=True) as store:
        rows = {r.kernel: r for r in store.best_rows(gpu="H100") if r.kernel in ("matmul", "flash_attn")}
    h100 = {k: fallback.misfit(registry.get(k), r, device_limits.MODELS["H100"]) for k, r in rows.items()}
    assert h100 == {"matmul": None, "flash_attn": None}  # what was tuned on the H100 fits it
    a10 = device_limits.MODELS["A10"]
    spec = registry.get("matmul")
    config = {**spec.space.default, "variant": "tma", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4}
    needs = spec.resources(config, {"m": 4096, "n": 4096, "k": 4096, "batch": 0, "dtype": "bf16"})
    assert needs.tma and needs.shared_memory == (128 + 256) * 64 * 2 * 4
    assert "shared memory" in device_limits.misfit(needs, 8, a10)
    assert "TMA" in device_limits.misfit(device_limits.Resources(tma=True), 4, device_limits.MODELS["A100"])
