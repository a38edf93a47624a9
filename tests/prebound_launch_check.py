"""With the GPU's Triton and the stand-in Hopper driver (tests/hopper_compile.py), its launcher replaced by one that
records what it is handed: a `Prebound` launch hands the compiled kernel's launcher what `kernel[grid](...)` hands
it, and goes back through `kernel[grid](...)` wherever Triton's binder would specialize the call differently. One
JSON line per case after the header:  python tests/prebound_launch_check.py TRITON_DIR"""

import gc
import json
import os
import time

import hopper_compile

LAUNCHES: list[tuple] = []
hopper_compile.CompileOnlyHopperDriver.launcher_cls = lambda self, src, metadata: lambda *args: LAUNCHES.append(args)
LAUNCH_METADATA = 6  # the launcher's arguments: grid x3, stream, function, packed metadata, launch metadata, ...
KERNEL_ARGUMENTS = 9  # ... two hooks, then the kernel's arguments


def same_launch(a: tuple, b: tuple, fresh: tuple[int, ...] = ()) -> bool:
    """The same arguments (the same objects, or equal; a tensor of the same dtype, shape and strides: a buffer the
    call allocates; a TMA descriptor made per call over the same memory, tiles and layout, or where its kernel
    argument's index is in `fresh`, over a buffer the call allocates), the launch metadata a fresh object of the
    same type."""
    import torch

    def same(x, y, allocated: bool) -> bool:
        if x is y:
            return True
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            return type(x) is type(y) and (x.dtype, x.shape, x.stride()) == (y.dtype, y.shape, y.stride())
        if hasattr(x, "block_shape"):
            views = (x.base, y.base)  # a view made per call (a weight's transpose, [g | u]'s halves)
            same_memory = len({(t.data_ptr(), t.dtype, t.shape, t.stride()) for t in views}) == 1
            fields = ("shape", "strides", "block_shape", "layout", "padding")
            return (
                type(x) is type(y)
                and (same_memory or allocated and same(x.base, y.base, True))
                and all(getattr(x, f) == getattr(y, f) for f in fields)
            )
        return x == y

    return len(a) == len(b) and all(
        type(x) is type(y) if i == LAUNCH_METADATA else same(x, y, i - KERNEL_ARGUMENTS in fresh)
        for i, (x, y) in enumerate(zip(a, b))
    )


def through_triton_runs(*kernels) -> dict:
    """kernel -> a list that grows by one at each of its launches through Triton's own `run` from now on."""
    runs = {kernel: [] for kernel in kernels}
    for kernel in runs:
        kernel.run = (lambda through, seen: lambda *a, **k: seen.append(1) or through(*a, **k))(
            kernel.run, runs[kernel]
        )
    return runs


def per_call_us(fn, calls=2000) -> float:
    """Host time of fn() with the stand-in driver's launcher (which records, launches nothing), the fastest of
    three rounds, the garbage collector off while timing: a full collection among the launches the launcher keeps
    swung a round's figure 2-4x."""
    for _ in range(20):
        fn()
    del LAUNCHES[:]
    rounds = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(calls // 3):
                fn()
            rounds.append((time.perf_counter() - start) / (calls // 3))
            del LAUNCHES[:]
    finally:
        gc.enable()
    return round(min(rounds) * 1e6, 2)


def check() -> None:
    import torch

    os.environ["AUTOTUNE_PREBOUND"] = "1"
    from autotune.kernels.common.launch import Prebound
    from autotune.kernels.norm import group_norm as gn
    from autotune.kernels.norm.group_norm_common import ACTIVATIONS, accumulator, flat_strides

    kernel = gn._group_norm_looped_kernel
    runs = []
    through_triton = kernel.run
    kernel.run = lambda *a, **k: runs.append(1) or through_triton(*a, **k)

    def arguments(x, cg=10):
        y = torch.empty_like(x)
        w, b = torch.randn(x.shape[1], dtype=x.dtype), torch.randn(x.shape[1], dtype=x.dtype)
        mean, rstd = torch.empty(x.shape[0], 32, dtype=torch.float64), torch.empty(x.shape[0], 32)
        return (x, y, w, b, mean, rstd, 32, cg, 4096, 1e-5, *flat_strides(x), *flat_strides(y))

    meta = dict(
        HAS_W=True,
        HAS_B=True,
        ACTIVATION=ACTIVATIONS["silu"],
        ACC=accumulator(torch.float16),
        BLOCK_C=1,
        BLOCK_HW=1024,
        num_warps=4,
        num_stages=2,
    )
    x = torch.randn(2, 320, 64, 64, dtype=torch.float16)

    def case(name, ok, **detail):
        print(json.dumps({"case": name, "ok": bool(ok), **detail}), flush=True)

    launch = Prebound(kernel, (64,))
    launch(*arguments(x), **meta)  # through Triton: compiles, binds
    second = arguments(x)
    before = len(runs)
    launch(*second[:9], 2e-5, *second[10:], **meta)  # new tensors, another eps: floats are not specialized on
    fast, fast_runs = LAUNCHES[-1], len(runs) - before
    kernel[(64,)](*second[:9], 2e-5, *second[10:], **meta)
    case(
        "a later call hands the launcher what Triton does, without Triton's binding",
        fast_runs == 0 and same_launch(fast, LAUNCHES[-1]),
        runs=fast_runs,
        arguments=len(fast),
    )

    timed = arguments(x)
    case(
        "host time per launch (us): through Triton, prebound",
        True,
        triton=per_call_us(lambda: through_triton(*timed, grid=(64,), warmup=False, **meta)),
        prebound=per_call_us(lambda: launch(*timed, **meta)),
    )

    buffer = torch.randn(x.numel() + 8, dtype=x.dtype)
    misaligned = buffer[1 : 1 + x.numel()].view(x.shape)  # 2 bytes past a 16-byte boundary
    before = len(runs)
    launch(*arguments(misaligned), **meta)
    case("a tensor aligned otherwise goes through Triton", len(runs) - before == 1)
    before = len(runs)
    launch(*arguments(x, cg=16), **meta)
    case("another integer goes through Triton", len(runs) - before == 1)
    before = len(runs)
    launch(*arguments(x, cg=16), **{**meta, "num_warps": 8})
    case("another option goes through Triton", len(runs) - before == 1)

    os.environ["AUTOTUNE_PREBOUND"] = "0"
    off = Prebound(kernel, (64,))
    before = len(runs)
    off(*arguments(x), **meta)
    off(*arguments(x), **meta)
    case("off with AUTOTUNE_PREBOUND=0: every call through Triton", len(runs) - before == 2)

    del os.environ["AUTOTUNE_PREBOUND"]
    default = Prebound(kernel, (64,))
    before = len(runs)
    default(*arguments(x), **meta)
    default(*arguments(x), **meta)
    case("on where AUTOTUNE_PREBOUND is not set: the later call skips Triton", len(runs) - before == 1)

    os.environ["AUTOTUNE_PREBOUND"] = "1"
    single = gn._group_norm_single_kernel
    single_runs = []
    single_through_triton = single.run
    single.run = lambda *a, **k: single_runs.append(1) or single_through_triton(*a, **k)
    config = {"variant": "single", "BLOCK": 16 * 4096, "SPLIT": 1, "num_warps": 32, "num_stages": 1}
    small = torch.randn(2, 512, 64, 64, dtype=torch.float16)
    planned = gn._launcher(small, torch.empty_like(small), 32, "silu", True, True, config, prebound=True)  # as _plan
    w, b = torch.randn(512, dtype=small.dtype), torch.randn(512, dtype=small.dtype)
    mean, rstd = torch.empty(2, 32, dtype=torch.float64), torch.empty(2, 32)
    for _ in range(3):
        planned(small, torch.empty_like(small), w, b, mean, rstd, 1e-5)
    case("group_norm's planned launch binds once", len(single_runs) == 1, runs=len(single_runs))

    from autotune.kernels.norm import layer_norm as ln

    rows = torch.randn(64, 320, dtype=torch.float16)
    config, planned, meta = ln._plan(False, rows.dtype, 64, 320, False, True, True)
    rows_kernel = planned.kernel
    rows_runs = []
    rows_through_triton = rows_kernel.run
    rows_kernel.run = lambda *a, **k: rows_runs.append(1) or rows_through_triton(*a, **k)
    w, b = torch.randn(320, dtype=rows.dtype), torch.randn(320, dtype=rows.dtype)
    for _ in range(3):
        y, stats = torch.empty_like(rows), torch.empty(2 * 64 + 64)
        planned(rows, rows, w, b, y, y, stats[:128], stats[128:], 64, 320, 320, 0, 320, 0, 1e-5, **meta)
    case("layer_norm's planned launch binds once", len(rows_runs) == 1, runs=len(rows_runs))
    unplanned = ln._launcher(config, False, False, True, True, 64)[0]
    case("an unplanned launch goes through Triton", not isinstance(unplanned, Prebound))

    from autotune.kernels.attention import flash_attn as fa
    from autotune.search_spaces.flash_attn import FORWARD_SPACE

    attention_kernels = (fa._attn_fwd_kernel, fa._combine_splits_kernel, fa._attn_fwd_last_split_kernel)
    attention_runs = through_triton_runs(*attention_kernels)
    q = torch.randn(2, 16, 1, 64, dtype=torch.float16)
    k, v = torch.randn(2, 4, 1024, 64, dtype=torch.float16), torch.randn(2, 4, 1024, 64, dtype=torch.float16)
    o, lse = torch.empty_like(q), torch.empty(2, 16, 1)
    tile = dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=2, gqa="packed", p="rounded")
    whole = FORWARD_SPACE.with_overrides(**tile, kv_load="descriptor")
    fa.launch(q, k, v, o, lse, False, 0.125, whole, planned=True)  # through Triton: compiles, binds
    fa.launch(q, k, v, o, lse, False, 0.125, whole, planned=True)
    planned_launch = LAUNCHES[-1]
    fa.launch(q, k, v, o, lse, False, 0.125, whole)
    case(
        "flash_attn's planned launch hands the launcher what Triton does, binding once",
        same_launch(planned_launch, LAUNCHES[-1]) and len(attention_runs[fa._attn_fwd_kernel]) == 2,
        runs=len(attention_runs[fa._attn_fwd_kernel]),
        host_us_through_triton=per_call_us(lambda: fa.launch(q, k, v, o, lse, False, 0.125, whole), calls=500),
        host_us_planned=per_call_us(lambda: fa.launch(q, k, v, o, lse, False, 0.125, whole, planned=True), calls=500),
    )
    for runs_of in attention_runs.values():
        runs_of.clear()
    for combine in ("kernel", "last_split"):
        split = FORWARD_SPACE.with_overrides(**tile, KV_SPLITS=4, combine=combine)
        for _ in range(3):
            fa.launch(q, k, v, o, lse, False, 0.125, split, planned=True)
    case(
        "flash_attn's key-split launches bind once (the forward, the merge kernel, the last-split kernel)",
        all(len(runs_of) == 1 for runs_of in attention_runs.values()),
        runs=[len(runs_of) for runs_of in attention_runs.values()],
    )

    kept_launches(case)


def kept_launches(case) -> None:
    """The public calls' kept launches (`launch.kept`) of rope, the norms' backward and gated_mlp's backward step:
    each binds once, and a later call hands the launcher what Triton's own launch hands it."""
    import torch

    from autotune.kernels.gemm import gated_backward as gb
    from autotune.kernels.norm import layer_norm_backward as lnb
    from autotune.kernels.rope import kernel as rope
    from autotune.kernels.rope import rotary

    def check_kept(name, kernels, call, fresh=None):
        """call(kept) three times with the kept launches, then once through Triton: its launches (`kernels`, in
        order) compared (`fresh`: launch index -> its kernel arguments' indices that are descriptors over a buffer
        the call allocates). A kernel runs through Triton at most once a launch in the three (none where an earlier
        case bound it on the same grid)."""
        fresh = fresh or {}
        runs = through_triton_runs(*kernels)
        launches_of = [kernels.count(kernel) for kernel in runs]
        for _ in range(3):
            del LAUNCHES[:]
            call(True)
        kept, kept_runs = list(LAUNCHES), [len(seen) for seen in runs.values()]
        del LAUNCHES[:]
        call(False)
        case(
            f"{name}: the kept launches bind once and hand the launcher what Triton does",
            len(kept) == len(LAUNCHES) == len(kernels)
            and all(same_launch(a, b, fresh.get(i, ())) for i, (a, b) in enumerate(zip(kept, LAUNCHES)))
            and all(n <= per and len(seen) == n + per for n, per, seen in zip(kept_runs, launches_of, runs.values())),
            launches=len(kept),
            runs_kept=kept_runs,
            host_us_through_triton=per_call_us(lambda: call(False), calls=500),
            host_us_kept=per_call_us(lambda: call(True), calls=500),
        )

    q, k = torch.randn(1, 8, 128, 64, dtype=torch.float16), torch.randn(1, 2, 128, 64, dtype=torch.float16)
    cos, sin = torch.randn(1, 128, 64, dtype=torch.float16), torch.randn(1, 128, 64, dtype=torch.float16)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    for variant in ("loop", "split"):
        config = {"variant": variant, "BLOCK_H": 2, "num_warps": 2, "num_stages": 1}
        for backward in (False, True):
            check_kept(
                f"rope ({variant}, {'backward' if backward else 'forward'})",
                [rope._rope_kernel],
                lambda kept: rope.launch(
                    q, k, cos, sin, q_out, k_out, config, backward=backward, table=rotary._TUNED if kept else None
                ),
            )

    rows, cols = 256, 512
    dy, x = torch.randn(rows, cols, dtype=torch.float16), torch.randn(rows, cols, dtype=torch.float16)
    weight, dx, dw = torch.randn(cols, dtype=torch.float16), torch.empty_like(x), torch.empty(cols, dtype=torch.float16)
    for kernel_name, kernel in (
        ("tiles", lnb.tiles_._norm_backward_tiles_kernel),
        ("tiles_ahead", lnb.ahead_._norm_backward_tiles_ahead_kernel),
    ):
        config = {
            "kernel": kernel_name,
            "variant": "partials",
            "BLOCK_N": 512,
            "BLOCK_M": 2,
            "READS": 1,
            "PROGRAMS_PER_SM": 1,
            "num_warps": 4,
            "num_stages": 1,
        }
        check_kept(
            f"rms_norm backward ({kernel_name}) and its sum of partials",
            [kernel, lnb._sum_partials_kernel],
            lambda kept: lnb.launch_rows(
                dy, x, weight, None, None, dx, dw, None, 1e-6, True, config, table=lnb._TUNED[True] if kept else None
            ),
        )

    from autotune.kernels.attention import flash_attn_backward as fab
    from autotune.search_spaces.flash_attn import BACKWARD_SPACE

    q, k, v = (torch.randn(1, 4, 256, 64, dtype=torch.float16) for _ in range(3))
    o, do, lse = torch.randn_like(q), torch.randn_like(q), torch.randn(1, 4, 256)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    for delta, kernels in (
        ("recomputed", [fab._attn_bwd_query_kernel, fab._attn_bwd_dkdv_kernel, fab._attn_bwd_query_kernel]),
        ("output", [fab._delta_kernel, fab._attn_bwd_dkdv_kernel, fab._attn_bwd_query_kernel]),
    ):
        config = BACKWARD_SPACE.with_overrides(
            BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=1, dq="separate", delta=delta
        )
        check_kept(
            f"flash_attn backward (delta {delta})",
            kernels,
            lambda kept: fab.launch(
                do, q, k, v, o, lse, dq, dk, dv, True, 0.125, config, table=fab._TUNED if kept else None
            ),
        )

    dh, gu = torch.randn(64, 256, dtype=torch.float16), torch.randn(64, 512, dtype=torch.float16)
    dgu = torch.empty_like(gu)
    check_kept(
        "gated_mlp's backward step",
        [gb._gated_backward_kernel],
        lambda kept: gb._launch(dh, gu, dgu, "silu", {"BLOCK": 128, "num_warps": 4}, table=gb._TUNED if kept else None),
    )

    # The Gluon Hopper GEMM: a plain product and a gated one with [g | u], one grid, other constexprs (two kept
    # launches); its TMA descriptors are made anew each call, the launch bound once each.
    from autotune.kernels.gemm import gated_mlp, hopper_gemm
    from autotune.kernels.gemm import matmul as matmul_
    from autotune.search_spaces import hopper_gemm_config as gemm_config

    a, b = torch.randn(256, 128, dtype=torch.bfloat16), torch.randn(128, 256, dtype=torch.bfloat16)
    w, c = torch.randn(256, 128, dtype=torch.bfloat16), torch.empty(256, 256, dtype=torch.bfloat16)
    h, g_u = torch.empty(256, 256, dtype=torch.bfloat16), torch.empty(256, 512, dtype=torch.bfloat16)
    plain, gated = dict(gemm_config.DEFAULT_CONFIG), dict(gemm_config.DEFAULT_GATED_CONFIG)

    def gemms(kept: bool) -> None:
        hopper_gemm.launch_matmul(a, b, c, plain, matmul_._TUNED_MATMUL if kept else None)
        hopper_gemm.launch_gated(a, w, w, h, g_u, "silu", gated, gated_mlp._TUNED if kept else None)

    gemm = hopper_gemm._hopper_gemm_kernel
    check_kept("the Gluon Hopper GEMM (plain, then gated with [g | u])", [gemm, gemm], gemms)

    # The Gluon attention: the forward, and the backward's four launches (its per-row pass, delta recomputed by the
    # dQ kernel, dK and dV, then dQ: one kernel on one grid twice, other constexprs), TMA descriptors made anew.
    from autotune.kernels.attention import flash_attn as fa
    from autotune.kernels.attention import hopper_backward, hopper_backward_dkdv, hopper_backward_dq, hopper_forward

    q, k, v = (torch.randn(1, 2, 128, 64, dtype=torch.bfloat16) for _ in range(3))
    o, do, lse = torch.empty_like(q), torch.randn_like(q), torch.randn(1, 2, 128)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    check_kept(
        "the Gluon attention forward",
        [hopper_forward._attn_fwd_kernel],
        lambda kept: hopper_forward.launch(
            q, k, v, o, lse, True, 0.125, hopper_forward.DEFAULT_CONFIG, fa._TUNED if kept else None
        ),
    )
    separate = dict(hopper_backward.DEFAULT_CONFIG, DQ="separate")
    dq_kernel = hopper_backward_dq._attn_bwd_dq_kernel
    check_kept(
        "the Gluon attention backward (delta recomputed, dQ separate)",
        [hopper_backward._rows_kernel, dq_kernel, hopper_backward_dkdv._attn_bwd_dkdv_kernel, dq_kernel],
        lambda kept: hopper_backward.launch(
            do, q, k, v, o, lse, dq, dk, dv, True, 0.125, separate, fab._TUNED if kept else None
        ),
        fresh={2: (8,)},  # the dK/dV launch's ninth argument: dQ's float32 accumulator, allocated per call
    )


if __name__ == "__main__":
    hopper_compile.compile_with_given_triton(__doc__.splitlines()[0], check)
