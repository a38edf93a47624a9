"""autotune.kernels.common.launch.Prebound, checked with the GPU's Triton and a stand-in driver that records what
each launch hands the compiled kernel's launcher (tests/prebound_launch_check.py): a later call at a call site hands
it what `kernel[grid](...)` would, without Triton's per-call binding; a call the binder would specialize differently
(a tensor's alignment, an integer, an option) goes through Triton; it is on by default, off with AUTOTUNE_PREBOUND=0;
group_norm's, layer_norm's and flash_attn's planned launches bind once, their unplanned ones go through Triton; the
kept launches of rope's forward and backward, the norms' backward, flash_attn's backward, gated_mlp's backward
step, the Gluon Hopper GEMM and the Gluon attention's forward and backward bind once and hand the launcher what
Triton's launch does."""

import pytest
from gpu_triton import GPU_TRITON_VERSION, run_compile_script

CASES = {
    "a later call hands the launcher what Triton does, without Triton's binding",
    "a tensor aligned otherwise goes through Triton",
    "another integer goes through Triton",
    "another option goes through Triton",
    "off with AUTOTUNE_PREBOUND=0: every call through Triton",
    "on where AUTOTUNE_PREBOUND is not set: the later call skips Triton",
    "group_norm's planned launch binds once",
    "layer_norm's planned launch binds once",
    "an unplanned launch goes through Triton",
    "flash_attn's planned launch hands the launcher what Triton does, binding once",
    "flash_attn's key-split launches bind once (the forward, the merge kernel, the last-split kernel)",
    "host time per launch (us): through Triton, prebound",
    *(
        f"rope ({variant}, {way}): the kept launches bind once and hand the launcher what Triton does"
        for variant in ("loop", "split")
        for way in ("forward", "backward")
    ),
    *(
        f"rms_norm backward ({kernel}) and its sum of partials: the kept launches bind once and hand the launcher "
        "what Triton does"
        for kernel in ("tiles", "tiles_ahead")
    ),
    *(
        f"flash_attn backward (delta {delta}): the kept launches bind once and hand the launcher what Triton does"
        for delta in ("recomputed", "output")
    ),
    "gated_mlp's backward step: the kept launches bind once and hand the launcher what Triton does",
    "the Gluon Hopper GEMM (plain, then gated with [g | u]): the kept launches bind once and hand the launcher what "
    "Triton does",
    "the Gluon attention forward: the kept launches bind once and hand the launcher what Triton does",
    "the Gluon attention backward (delta recomputed, dQ separate): the kept launches bind once and hand the launcher "
    "what Triton does",
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[dict, list[dict]]:
    return run_compile_script(
        "prebound_launch_check.py",
        "a prebound launch hands the launcher what Triton does",
        tmp_path_factory.mktemp("triton-cache"),
        timeout=600,
    )


def test_it_ran_with_the_gpu_triton(checked):
    header, _ = checked
    assert header["triton"] == GPU_TRITON_VERSION


@pytest.mark.parametrize("case", sorted(CASES))
def test_case(checked, case):
    _, lines = checked
    by_case = {line["case"]: line for line in lines}
    assert set(by_case) == CASES
    assert by_case[case]["ok"], by_case[case]
