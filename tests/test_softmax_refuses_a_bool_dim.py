"""softmax(x, dim=True) raises TypeError, as torch.softmax does: a bool is an int to operator.index but not a
dim; it used to be taken as dim 1."""

from __future__ import annotations

import pytest
import torch

from autotune.kernels import softmax


@pytest.mark.parametrize("dim", (True, False))
def test_a_bool_dim_is_a_type_error_like_torchs(dim):
    x = torch.randn(3, 4)
    with pytest.raises(TypeError):
        torch.softmax(x, dim=dim)
    with pytest.raises(TypeError, match="dim must be an int, got bool"):
        softmax(x, dim=dim)


def test_int_like_dims_still_work():
    x = torch.randn(3, 4)
    torch.testing.assert_close(softmax(x, dim=torch.tensor(0)), torch.softmax(x, 0))
    torch.testing.assert_close(softmax(x, dim=1), torch.softmax(x, 1))
