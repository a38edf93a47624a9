"""Run on the device (`pytest -m gpu`): what the interpreter cannot show."""

import pytest
import torch

import autotune
from autotune import gpu, runtime
from autotune.gate.verify import verify
from autotune.kernels import add, softmax

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", autotune.names())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_default_config_verifies_on_the_gpu_with_large_problems(name, dtype):
    spec = autotune.get(name)
    if dtype not in spec.dtypes:
        pytest.skip(f"{name} does not take {dtype}")
    result = verify(spec, spec.space.default, dtype, examples=40, max_numel=1 << 22)
    assert result.passed, result.failure and result.failure.describe()


def test_gpu_identity_names_the_device():
    info = gpu.current_gpu()
    assert info.name != gpu.CPU_INTERPRETER and info.sm_count and info.compute_capability


def test_kernels_match_torch_on_long_rows_and_big_tensors():
    x = torch.randn(64, 131072, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(softmax(x, -1), torch.softmax(x, -1), atol=2e-3, rtol=1e-2)
    y = torch.randn(1 << 26, device="cuda", dtype=torch.float16)
    assert torch.equal(add(y, y), y + y)


def test_bad_device_mix_is_refused_before_launch():
    with runtime.record_launches() as launches, pytest.raises(ValueError, match="must be on"):
        add(torch.ones(4, device="cuda"), torch.ones(4))
    assert launches == []
