"""Every shipped kernel's default config compiles for Hopper (sm_90) with the GPU machine's Triton, in each
dtype. Elsewhere the tests run the kernels under the interpreter of whatever Triton pip gives, whose front
end may accept what the GPU's rejects (Triton 3.6 failed every float32 flash_attn call on a float64 tl.dot
accumulator that 3.9 takes). tests/hopper_compile.py compiles with the GPU's Triton here, without a GPU.

Where that Triton is: AUTOTUNE_GPU_TRITON, a directory made by
`pip install -q --no-deps --target DIR triton==3.6.0` (.ci/run makes one). Unset: skipped, except in CI."""

import pytest
from gpu_triton import GPU_TRITON_VERSION, run_compile_script

from autotune.runtime import registry

DTYPES = {"float32", "float16", "bfloat16"}
COMPILE_TIMEOUT_S = 1200  # all of them take about 40 s on a dev machine, compiled one after another


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[dict, list[dict]]:
    """hopper_compile.py's header line (the Triton it used) and its lines per (kernel, dtype), from a fresh
    kernel cache so that every kernel is compiled in this run."""
    cache = tmp_path_factory.mktemp("triton-cache")
    return run_compile_script("hopper_compile.py", "the kernels compile for the GPU", cache, COMPILE_TIMEOUT_S)


def test_it_compiles_with_the_gpu_triton(compiled):
    header, _ = compiled
    assert header["triton"] == GPU_TRITON_VERSION, f"compiled with Triton {header['triton']} from {header['path']}"


def assert_compiled(lines: list[dict]) -> None:
    failures = [
        f"{line['kernel']} {line['dtype']} {line['config']}:\n{line['error']}" for line in lines if not line["ok"]
    ]
    if failures:
        summary = f"{len(failures)} of {len(lines)} do not compile for sm_90"
        pytest.fail(f"{summary}:\n\n" + "\n\n".join(failures), pytrace=False)


def test_every_shipped_default_config_compiles_for_hopper(compiled):
    _, lines = compiled
    defaults = [line for line in lines if line["config"] == "default"]
    assert {(line["kernel"], line["dtype"]) for line in defaults} == {
        (k, d) for k in registry.shipped() for d in DTYPES
    }
    assert_compiled(defaults)


def test_the_gemms_descriptor_variants_compile_for_hopper_from_autotunes_host_descriptors(compiled):
    _, lines = compiled
    variants = [line for line in lines if line["config"] in ("tma", "tma_persistent")]
    assert {(line["kernel"], line["config"]) for line in variants} == {("matmul", "tma"), ("linear", "tma_persistent")}
    assert {line["dtype"] for line in variants} == DTYPES
    assert_compiled(variants)


def test_the_variants_no_default_compiles_compile_for_hopper(compiled):
    # softmax_backward's single-pass kernel, group_norm's split, cached and onepass (channels-last too), the norm
    # backward's tiles kernel (rows read once and twice), gated_mlp's two accumulators read by the TMA unit,
    # flash_attn's key splits merged by the program that finishes last (an acquire-release counter), the backward's
    # dV pass with P split.
    _, lines = compiled
    variants = [line for line in lines if line["config"] not in ("default", "tma", "tma_persistent")]
    assert {(line["kernel"], line["config"]) for line in variants} == {
        ("softmax_backward", "single"),
        ("group_norm", "split"),
        ("group_norm", "cached"),
        ("group_norm", "onepass"),
        ("group_norm", "onepass_channels_last"),
        ("layer_norm_backward", "tiles"),
        ("rms_norm_backward", "tiles_read_twice"),
        ("gated_mlp", "gated_tma_persistent"),
        ("flash_attn", "last_split"),
        ("flash_attn_backward", "dv_split"),
    }
    assert {line["dtype"] for line in variants} == DTYPES
    assert_compiled(variants)
