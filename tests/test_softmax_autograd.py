import torch

import autotune.kernels.vector_add.add as vector_add
from autotune.kernels import softmax


def test_softmax_gradient_matches_torch():
    x = torch.randn(7, 33, dtype=torch.float32, requires_grad=True)
    g = torch.randn(7, 33)
    for dim in (0, 1, -1):
        (ours,) = torch.autograd.grad(softmax(x, dim), x, g)
        (theirs,) = torch.autograd.grad(torch.softmax(x, dim), x, g)
        torch.testing.assert_close(ours, theirs)


def test_without_grad_no_graph_is_built():
    x = torch.randn(4, 9, requires_grad=True)
    with torch.no_grad():
        assert softmax(x).grad_fn is None
    assert softmax(x).grad_fn is not None


def test_layouts_drawn_for_verification_really_are_strided():
    for layout in ("transposed", "sliced"):
        inputs = vector_add.make_inputs(
            {"shape": [5, 6], "layout": layout, "magnitude": 1e4}, torch.float16, torch.device("cpu"), 0
        )
        assert not inputs["x"].is_contiguous() and inputs["x"].abs().max() > 100
