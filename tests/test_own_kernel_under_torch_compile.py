"""A kernel of one's own under torch.compile(fullgraph=True): the decorated call is a custom op whose fake is the
user's reference, so a graph around it compiles whole and launches the tuned config at run time."""

import torch
import triton
import user_kernels
from hypothesis import strategies as st
from stored_rows import store_best

import autotune
from autotune import runtime


def test_fullgraph_compile_around_a_decorated_call_launches_the_stored_config(user_db):
    stored = {"BLOCK": 1024, "num_warps": 4, "num_stages": 2}
    store_best(user_db, user_kernels.axpy.spec, "n=1024", stored)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y: user_kernels.axpy(x, y, 3.0) * 2 + 1, fullgraph=True)
    x, y = torch.randn(1000), torch.randn(1000)
    with runtime.record_launches() as launched:
        out = compiled(x, y)
    torch.testing.assert_close(out, (3 * x + y) * 2 + 1)
    assert launched == [("axpy", stored)]


def test_several_outputs_come_back_as_a_tuple_under_compile(user_db):
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: user_kernels.scale_rows(x, w), fullgraph=True)
    x, w = torch.randn(3, 100), torch.randn(100)
    scaled, sums = compiled(x, w)
    torch.testing.assert_close(scaled, x * w)
    torch.testing.assert_close(sums, x.sum(-1))


def test_a_launcher_whose_arguments_no_schema_types_still_runs_compiled_with_a_graph_break(user_db):
    kernel = autotune.tune(
        args={"x": autotune.Tensor("n"), "scale": st.floats(1, 2)},
        reference=lambda x, scale: x * scale,
        configs=[triton.Config({"B": 1})],
        dtypes=("fp32",),
        name="untyped_scale",
    )(lambda x, scale, *, config: x * scale)  # no default to type `scale` by
    assert kernel._compiled is None
    torch._dynamo.reset()
    x = torch.randn(10)
    torch.testing.assert_close(torch.compile(lambda x: kernel(x, 2.0) + 1)(x), x * 2 + 1)
